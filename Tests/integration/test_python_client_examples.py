"""The examples of clients/python/README.md, run as written (clients/python/examples/)
against the real daemon: the plain loop, and the Celery task in a real Celery worker
(in-memory broker, the solo pool), and the Airflow operator in a real `airflow dags test`
run, in the Airflow venv scripts/install-deps.sh makes (skipped, and so untested, without
it)."""
import glob
import os
import pathlib
import subprocess
import sys
import textwrap

import httpx
import pytest

from conftest import ROOT

EXAMPLES = ROOT / "clients/python/examples"
PATIENCE = 120


def run(code, base, cwd):
    script = cwd / "run_example.py"
    script.write_text(textwrap.dedent(code))
    environment = {**os.environ, "HEADWAY_URL": base, "PYTHONPATH": str(EXAMPLES)}
    for name in ("HEADWAY_TOKEN", "HEADWAY_TASK_PREFIX", "HEADWAY_PATCH_TQDM"):
        environment.pop(name, None)
    result = subprocess.run([sys.executable, str(script)], env=environment, capture_output=True, text=True,
                            timeout=PATIENCE, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def wheel():
    """The wheel `make python-client` built."""
    built = sorted(glob.glob(str(ROOT / "clients/python/dist/headway-*.whl")), key=os.path.getmtime)
    assert built, "no wheel in clients/python/dist: `make python-client` builds it"
    return built[-1]


def tasks(base):
    return httpx.get(f"{base}/v1/tasks", params={"page_size": 500}).json()["tasks"]


def test_the_readme_shows_each_example_as_it_is_run():
    readme = (ROOT / "clients/python/README.md").read_text()
    for example in ["plain_loop.py", "celery_tasks.py", "airflow_operator.py"]:
        assert (EXAMPLES / example).read_text().strip() in readme, example


def test_the_plain_loop_example(headwayd, tmp_path):
    run("import runpy; runpy.run_path(%r, run_name='__main__')" % str(EXAMPLES / "plain_loop.py"), headwayd, tmp_path)
    by_name = {t["name"]: t for t in tasks(headwayd)}
    assert by_name["Nightly photo resize"]["id"] == "photo-resize"
    assert by_name["Nightly photo resize"]["state"] == "succeeded"
    resizing = by_name["Resizing"]
    assert (resizing["parent_id"], resizing["completed"], resizing["total"], resizing["unit"], resizing["state"]) == \
        ("photo-resize", 2000, 2000, "images", "succeeded")


def test_the_celery_example_in_a_real_worker(headwayd, tmp_path):
    pytest.importorskip("celery", reason="celery is installed by scripts/install-deps.sh")
    output = run("""
        import headway
        from celery.contrib.testing.worker import start_worker
        import celery_tasks

        celery_tasks.app.conf.update(broker_url="memory://", result_backend="cache+memory://")
        with start_worker(celery_tasks.app, pool="solo", perform_ping_check=False):
            result = celery_tasks.resize_photos.delay([f"photos/{n}.jpg" for n in range(300)])
            print(result.id, result.get(timeout=60))
        assert headway.flush(30)
    """, headwayd, tmp_path)
    celery_id, outcome = output.split()
    assert outcome == "done"
    (stored,) = tasks(headwayd)
    assert stored["id"] == celery_id
    assert (stored["name"], stored["completed"], stored["state"]) == ("Resize 300 photos", 300, "succeeded")


AIRFLOW = pathlib.Path(os.environ.get("HEADWAY_AIRFLOW_VENV", ROOT / ".build/airflow-venv"))


@pytest.mark.skipif(not (AIRFLOW / "bin/airflow").exists(),
                    reason="UNTESTED here: no Airflow venv (scripts/install-deps.sh makes .build/airflow-venv)")
def test_the_airflow_operator_example(headwayd, tmp_path):
    # Airflow's own venv (scripts/install-deps.sh) gets the wheel; a DAG file using the
    # example's operator is serialized and run by `airflow dags test`, Airflow's own
    # runner of one DAG run, on a fresh SQLite metadata database.
    subprocess.run([str(AIRFLOW / "bin/python3"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--force-reinstall", "--no-deps", wheel()], check=True, timeout=PATIENCE)
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    (home / "dags/photos_dag.py").write_text(textwrap.dedent("""
        import datetime
        from airflow.sdk import DAG
        from airflow_operator import ResizePhotosOperator

        with DAG("photos", schedule=None, start_date=datetime.datetime(2026, 1, 1)) as dag:
            ResizePhotosOperator(task_id="resize", paths=[f"photos/{n}.jpg" for n in range(40)])
    """))
    environment = {**os.environ, "AIRFLOW_HOME": str(home), "PYTHONPATH": str(EXAMPLES), "HEADWAY_URL": headwayd,
                   "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    for name in ("HEADWAY_TOKEN", "HEADWAY_TASK_PREFIX", "HEADWAY_PATCH_TQDM", "VIRTUAL_ENV"):
        environment.pop(name, None)
    for command in (["db", "migrate"], ["dags", "reserialize"], ["dags", "test", "photos"]):
        result = subprocess.run([str(AIRFLOW / "bin/airflow"), *command], env=environment, capture_output=True,
                                text=True, timeout=300, cwd=tmp_path)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (stored,) = tasks(headwayd)
    assert stored["id"].startswith("photos.resize.manual__") and stored["id"].endswith(".1")
    assert (stored["name"], stored["completed"], stored["state"]) == ("photos / resize", 40, "succeeded")
