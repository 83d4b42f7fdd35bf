"""README.md's "A runner's life", run as written against a live daemon: its curl lines,
then its `headway` lines, so the front door shows what works."""
import os
import pathlib
import re
import subprocess

import httpx

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
