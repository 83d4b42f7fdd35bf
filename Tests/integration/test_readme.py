"""README.md's "A runner's life" and "Reporting from …", run as written against a live
daemon: their curl lines, `headway` lines, `headway run` and Python, so the front door
shows what works."""
import os
import pathlib
import re
import subprocess
import sys

import httpx
import pytest

from conftest import HEADWAYD, run_headwayd

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEADWAY = os.environ.get("HEADWAY", str(ROOT / ".build/debug/headway"))
README_URL = "http://127.0.0.1:8080"


def runners_life_blocks():
    """The shell blocks of README.md's section "A runner's life"."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## A runner's life", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def run_shell(script, cwd, env=None):
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{script}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_the_readmes_curl_lines_register_report_and_finish_a_task(headwayd, tmp_path):
    blocks = [block for block in runners_life_blocks() if block.lstrip().startswith("curl")]
    assert len(blocks) >= 3, "the section lost its curl blocks"
    # -f: a refused request fails the script, as a reader would see it fail.
    script = "\n".join(blocks).replace(README_URL, headwayd).replace("curl -s ", "curl -sf ")
    run_shell(script, tmp_path)
    task = httpx.get(f"{headwayd}/v1/tasks/backup-db-3").json()
    assert (task["state"], task["completed"], task["total"]) == ("succeeded", 1200, 1200)


def test_the_readmes_headway_lines_run_too(headwayd, tmp_path):
    blocks = [block for block in runners_life_blocks() if "headway start" in block]
    assert len(blocks) == 1, "the section lost its headway block"
    # `headway watch` redraws until stopped: everything before it is run.
    lines = [line for line in blocks[0].splitlines() if not line.startswith("headway watch")]
    (tmp_path / "backup.sh").write_text("#!/bin/sh\necho 1/2 copying\necho 2/2 copying\n")
    (tmp_path / "backup.sh").chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "headway").symlink_to(HEADWAY)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HEADWAY_URL": headwayd}
    run_shell("\n".join(lines), tmp_path, env)
    tasks = httpx.get(f"{headwayd}/v1/tasks").json()["tasks"]
    outcomes = sorted((task["name"], task["state"]) for task in tasks)
    assert outcomes == [("Nightly backup", "succeeded"), ("Nightly backup", "succeeded")], outcomes


def reporting_blocks():
    """The code blocks of README.md's section "Reporting from …", as (language, text)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Reporting from", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def reporting_block(first_line):
    """The block of that section whose first line starts with `first_line`."""
    found = [text for _, text in reporting_blocks() if text.startswith(first_line)]
    assert len(found) == 1, f"the section lost its block '{first_line}'"
    return found[0]


def photos_to_copy(directory):
    """`directory` with photos/ (120 small files) and an empty backup/, as the job needs."""
    (directory / "photos").mkdir()
    (directory / "backup").mkdir()
    for n in range(1, 121):
        (directory / "photos" / f"{n:03}.jpg").write_bytes(b"\xff\xd8 photo %d" % n)


def headway_on_path(directory, base):
    """An environment whose PATH finds the built `headway`, talking to `base`."""
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    (bin_dir / "headway").symlink_to(HEADWAY)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HEADWAY_URL": base}


def the_copy_was_reported(base, directory):
    """The job ran (every photo in backup/) and made one task: "Copy 120 photos",
    succeeded, 120 of 120 photos (or of 120 without a unit, for `headway run`)."""
    assert sorted(p.name for p in (directory / "backup").iterdir()) == [f"{n:03}.jpg" for n in range(1, 121)]
    tasks = httpx.get(f"{base}/v1/tasks").json()["tasks"]
    assert [(t["name"], t["state"], t["completed"], t["total"]) for t in tasks] == \
        [("Copy 120 photos", "succeeded", 120, 120)], tasks
    return tasks[0]


def test_the_five_ways_report_the_same_job():
    blocks = reporting_blocks()
    assert [language for language, _ in blocks] == ["sh", "sh", "sh", "python", "swift"]
    for _, text in blocks:
        assert "Copy 120 photos" in text and "photos" in text


def test_reporting_with_curl(headwayd, tmp_path):
    photos_to_copy(tmp_path)
    script = reporting_block("# curl").replace(README_URL, headwayd).replace("curl -s ", "curl -sf ")
    run_shell(script, tmp_path)
    task = the_copy_was_reported(headwayd, tmp_path)
    assert (task["id"], task["unit"], task["label"]) == ("copy-photos", "photos", "photos/120.jpg")


def test_reporting_with_headway(headwayd, tmp_path):
    photos_to_copy(tmp_path)
    run_shell(reporting_block("# headway:"), tmp_path, headway_on_path(tmp_path, headwayd))
    task = the_copy_was_reported(headwayd, tmp_path)
    assert (task["id"], task["unit"], task["label"]) == ("copy-photos", "photos", "photos/120.jpg")


def test_reporting_with_headway_run(headwayd, tmp_path):
    photos_to_copy(tmp_path)
    run_shell(reporting_block("# headway run"), tmp_path, headway_on_path(tmp_path, headwayd))
    task = the_copy_was_reported(headwayd, tmp_path)
    assert task["label"] == "120/120 photos/120.jpg"


def test_reporting_from_python(headwayd, tmp_path):
    photos_to_copy(tmp_path)
    (tmp_path / "copy.py").write_text(reporting_block("# Python"))
    environment = {**os.environ, "HEADWAY_URL": headwayd, "PYTHONPATH": str(ROOT / "clients/python")}
    for name in ("HEADWAY_TOKEN", "HEADWAY_TASK_PREFIX", "HEADWAY_PATCH_TQDM"):
        environment.pop(name, None)
    result = subprocess.run([sys.executable, "copy.py"], cwd=tmp_path, env=environment, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    task = the_copy_was_reported(headwayd, tmp_path)
    assert (task["id"], task["unit"]) == ("copy-photos", "photos")


@pytest.fixture
def headwayd_with_token(tmp_path):
    """The daemon with tokens required; yields its URL and a token of scopes report and read."""
    directory = tmp_path / "daemon"
    directory.mkdir()
    made = subprocess.run([HEADWAYD, "token", "create", "--scope", "report", "--scope", "read",
                           "--db", str(directory / "headway.db")], capture_output=True, text=True, check=True)
    with run_headwayd(directory) as base:
        yield base, made.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("way", ["curl", "headway", "headway run", "python"])
def test_the_long_versions_in_docs_reporting(headwayd_with_token, tmp_path, way):
    """docs/reporting.md's blocks, in order: curl, headway, headway run (sh), Python, Swift;
    each run as written against a daemon that requires a token (HEADWAY_URL, HEADWAY_TOKEN)."""
    base, token = headwayd_with_token
    blocks = re.findall(r"```(\w+)\n(.*?)```", (ROOT / "docs/reporting.md").read_text(), re.S)
    assert [language for language, _ in blocks] == ["sh", "sh", "sh", "python", "swift"]
    work = tmp_path / "work"
    work.mkdir()
    photos_to_copy(work)
    environment = {**headway_on_path(work, base), "HEADWAY_TOKEN": token, "PYTHONPATH": str(ROOT / "clients/python")}
    environment.pop("HEADWAY_TASK_PREFIX", None)
    if way == "python":
        (work / "copy.py").write_text(blocks[3][1])
        result = subprocess.run([sys.executable, "copy.py"], cwd=work, env=environment, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr
    else:
        run_shell(blocks[["curl", "headway", "headway run"].index(way)][1], work, environment)
    tasks = httpx.get(f"{base}/v1/tasks", headers={"Authorization": f"Bearer {token}"}).json()["tasks"]
    assert [(t["id"], t["name"], t["state"], t["completed"], t["total"]) for t in tasks] == \
        [("copy-photos", "Copy 120 photos", "succeeded", 120, 120)], tasks
    assert len(list((work / "backup").iterdir())) == 120
