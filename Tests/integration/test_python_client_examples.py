"""The examples of clients/python/README.md, run as written (clients/python/examples/)
against the real daemon: the plain loop, and the Celery task in a real Celery worker
(in-memory broker, the solo pool). The Airflow operator runs only where Airflow is
installed: `make test` does not install it (see the README), so it is skipped there."""
import importlib.util
import os
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


@pytest.mark.skipif(importlib.util.find_spec("airflow") is None,
                    reason="UNTESTED by make test: Airflow is not installed (see clients/python/README.md)")
def test_the_airflow_operator_example(headwayd, tmp_path):
    output = run("""
        import datetime, headway
        from airflow.models.dag import DAG
        from airflow_operator import ResizePhotosOperator

        with DAG("photos", schedule=None, start_date=datetime.datetime(2026, 1, 1)) as dag:
            ResizePhotosOperator(task_id="resize", paths=[f"photos/{n}.jpg" for n in range(40)])
        dag.test()
        assert headway.flush(30)
        print("ok")
    """, headwayd, tmp_path)
    assert output.strip().endswith("ok")
    (stored,) = tasks(headwayd)
    assert (stored["name"], stored["completed"], stored["state"]) == ("photos / resize", 40, "succeeded")
