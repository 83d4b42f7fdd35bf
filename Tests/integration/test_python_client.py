"""The Python client (clients/python, package `headway`) against the real daemon: each job
is a separate Python process (the interpreter running these tests, where `make test`
installed the wheel), so its reporter thread, exit hook and `python -m headway run` work
as they do for a user. Counts are exact after a 100,000-iteration loop, after a retry
the server had already applied (a proxy that loses the reply), and across the daemon
killed and restarted mid-run; a cancel raises in the loop; an unmodified tqdm script
reports its bars as a tree; a fresh venv without tqdm uses `track`."""
import contextlib
import glob
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import pytest

from conftest import HEADWAYD, ROOT, free_port, run_headwayd, wait_for_port

# How long anything awaited may take before the test gives up (a bound, not a measure).
PATIENCE = 60


def run_job(tmp_path, code, base, *, arguments=(), env=None, module_run=False, python=None, timeout=PATIENCE, **popen):
    """Runs `code` as a script in its own Python process reporting to `base`; returns the
    finished process (stdout and stderr as text)."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(code))
    command = [python or sys.executable, *(["-m", "headway", "run"] if module_run else []), str(script), *arguments]
    environment = {**os.environ, "HEADWAY_URL": base, "PYTHONUNBUFFERED": "1", **(env or {})}
    for name in ("HEADWAY_TOKEN", "HEADWAY_TASK_PREFIX", "HEADWAY_PATCH_TQDM"):
        if env is None or name not in env:
            environment.pop(name, None)
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, **popen)


def task(base, task_id, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    reply = httpx.get(f"{base}/v1/tasks/{task_id}", headers=headers)
    assert reply.status_code == 200, reply.text
    return reply.json()


def all_tasks(base, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{base}/v1/tasks", params={"page_size": 500}, headers=headers).json()["tasks"]


def wait_until(condition, what):
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("loop", ["track", "tqdm drawing", "tqdm disabled", "tqdm update"])
def test_a_100000_iteration_loop_is_stored_exactly(headwayd, tmp_path, loop):
    # A generator has no len: the total stays unknown, so `succeeded` does not set
    # completed = total, and the stored count is what the increments added up to.
    body = {
        "track": "for _ in headway.track(items(), 'loop', id='loop'): pass",
        "tqdm drawing": "for _ in headway.tqdm(items(), desc='loop', file=io.StringIO(), mininterval=0): pass",
        "tqdm disabled": "for _ in headway.tqdm(items(), desc='loop', disable=True): pass",
        "tqdm update": "bar = headway.tqdm(desc='loop', file=io.StringIO())\n"
                       "        for _ in items(): bar.update()\n"
                       "        bar.close()",
    }[loop]
    result = run_job(tmp_path, f"""
        import io, json, headway
        from headway import _reporter
        def items():
            yield from range(100_000)
        {body}
        assert headway.flush(30)
        print(json.dumps(_reporter.shared_reporter().sent))
    """, headwayd)
    assert result.returncode == 0, result.stderr
    sent = json.loads(result.stdout.strip().splitlines()[-1])
    tasks = all_tasks(headwayd)
    assert len(tasks) == 1
    assert tasks[0]["name"] == "loop"
    assert tasks[0]["completed"] == 100_000
    assert tasks[0]["state"] == "succeeded"
    # Coalesced: a handful of batch items, never one per iteration.
    assert sent["register"] == 1 and sent["finish"] == 1
    assert sent["items"] < 1_000, sent


class ReplyLosingProxy:
    """A loopback TCP proxy in front of the daemon that forwards every request but, for
    the first `lose` requests whose head starts with one of `lines` (`POST /v1/progress`
    by default), closes the client's connection instead of passing the reply on: the
    server applied the request, the client saw it fail."""

    def __init__(self, target_port, lose=1, lines=(b"POST /v1/progress ",)):
        self.target_port = target_port
        self.lose = lose
        self.lines = lines
        self.lost = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        with client, upstream:
            while True:
                request = self._read_message(client)
                if request is None:
                    return
                # The daemon answers only to its own name.
                request = re.sub(rb"\r\nHost: [^\r]*", f"\r\nHost: 127.0.0.1:{self.target_port}".encode(),
                                 request, count=1, flags=re.IGNORECASE)
                upstream.sendall(request)
                reply = self._read_message(upstream)
                if reply is None:
                    return
                if request.startswith(self.lines) and self.lost < self.lose:
                    self.lost += 1
                    return  # the reply is lost; the connection closes
                client.sendall(reply)

    @staticmethod
    def _read_message(sock):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            body += chunk
        return head + b"\r\n\r\n" + body

    def close(self):
        self.listener.close()


def test_a_retry_of_an_applied_batch_is_not_counted_twice(headwayd, tmp_path):
    port = int(headwayd.rsplit(":", 1)[1])
    proxy = ReplyLosingProxy(port, lose=3)
    try:
        result = run_job(tmp_path, """
            import headway
            task = headway.Task("retried", id="retried")
            for round in range(5):
                task.progress(increment=7)
                assert headway.flush(30)
            task.finish("succeeded")
            assert headway.flush(30)
        """, f"http://127.0.0.1:{proxy.port}")
    finally:
        proxy.close()
    assert result.returncode == 0, result.stderr
    assert proxy.lost == 3
    stored = task(headwayd, "retried")
    assert stored["completed"] == 35
    assert stored["state"] == "succeeded"


def test_lost_replies_to_a_registration_and_a_finish_change_nothing(headwayd, tmp_path):
    port = int(headwayd.rsplit(":", 1)[1])
    proxy = ReplyLosingProxy(port, lose=3, lines=(b"POST /v1/tasks ", b"POST /v1/tasks/"))
    try:
        result = run_job(tmp_path, """
            import headway
            task = headway.Task("registered twice", total=4)
            task.update(4)
            task.finish("succeeded")
            assert headway.flush(30)
        """, f"http://127.0.0.1:{proxy.port}")
    finally:
        proxy.close()
    assert result.returncode == 0, result.stderr
    assert proxy.lost == 3
    (stored,) = all_tasks(headwayd)
    assert (stored["completed"], stored["state"]) == (4, "succeeded")


def test_an_id_registered_otherwise_is_adopted_and_counted_on(headwayd, tmp_path):
    reply = httpx.post(f"{headwayd}/v1/tasks", json={"id": "nightly", "name": "Nightly", "total": 100})
    assert reply.status_code == 201
    httpx.post(f"{headwayd}/v1/tasks/nightly/progress", json={"completed": 30, "seq": 9})
    result = run_job(tmp_path, """
        import headway
        task = headway.Task("Nightly, again", id="nightly", total=100)
        for _ in range(20):
            task.update()
        assert headway.flush(30)
        print(task.server_state["completed"], task.server_state["seq"])
    """, headwayd)
    assert result.returncode == 0, result.stderr
    # The conflicting registration (another name) adopted the stored task: its seq
    # went on from 9, and the increments added to what was stored.
    completed, seq = map(int, result.stdout.split())
    assert completed == 50 and seq > 9
    assert task(headwayd, "nightly")["name"] == "Nightly"


@contextlib.contextmanager
def daemon_on(port, database, log):
    """headwayd on `port` with the SQLite file `database`; killed with SIGKILL at the end
    of the block unless already gone."""
    process = subprocess.Popen([HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", str(database),
                                "--durability", "normal"], stderr=log)
    try:
        wait_for_port(port, process, "headwayd")
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)


def test_the_server_killed_mid_run_and_restarted_gets_the_final_state(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    database = tmp_path / "headway.db"
    script = tmp_path / "job.py"
    # The job goes on in steps the test releases through its stdin; no step waits for
    # the server.
    script.write_text(textwrap.dedent("""
        import sys, time, headway
        from headway import _reporter
        task = headway.Task("survives restarts", id="restarted", total=3000)
        for step in range(3):
            for _ in range(1000):
                task.update()
            if step == 1:
                # Step 1 runs while the daemon is down: wait (bounded) until the
                # reporter has found it away, so the outage is seen, not skipped.
                reporter, deadline = _reporter.shared_reporter(), time.monotonic() + 30
                while not reporter._away and time.monotonic() < deadline:
                    time.sleep(0.01)
            print(f"step {step}", flush=True)
            sys.stdin.readline()
        task.finish("succeeded")
        print("done", flush=True)
    """))
    with open(tmp_path / "headwayd.log", "w") as log:
        first = daemon_on(port, database, log)
        daemon = first.__enter__()
        job = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "HEADWAY_URL": base, "HEADWAY_EXIT_TIMEOUT": "30"})
        try:
            assert job.stdout.readline() == "step 0\n"
            wait_until(lambda: task(base, "restarted")["completed"] == 1000, "the first 1,000")
            daemon.kill()
            daemon.wait()
            first.__exit__(None, None, None)
            job.stdin.write("\n")
            job.stdin.flush()
            # The loop goes on while nothing listens.
            assert job.stdout.readline() == "step 1\n"
            with daemon_on(port, database, log):
                job.stdin.write("\n")
                job.stdin.flush()
                assert job.stdout.readline() == "step 2\n"
                job.stdin.write("\n")
                job.stdin.flush()
                assert job.stdout.readline() == "done\n"
                assert job.wait(timeout=PATIENCE) == 0
                stored = task(base, "restarted")
                stderr = job.stderr.read()
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
    assert stored["state"] == "succeeded"
    assert stored["completed"] == 3000
    assert stderr.count("headway: cannot reach") == 1, stderr


@pytest.mark.parametrize("loop", ["track", "tqdm", "Task.progress"])
def test_a_cancel_from_the_api_raises_in_the_loop(headwayd, tmp_path, loop):
    body = {
        "track": "for n in headway.track(itertools.count(), 'endless', id='endless'):\n    step(n)",
        "tqdm": "for n in headway.tqdm(itertools.count(), desc='endless', id='endless', file=io.StringIO()):\n"
                "    step(n)",
        "Task.progress": "task = headway.Task('endless')\n"
                         "for n in itertools.count():\n    task.progress(increment=1)\n    step(n)",
    }[loop]
    code = f"""
        import io, itertools, sys, time, headway
        started = time.monotonic()
        def step(n):
            if n == 0:
                print("started", flush=True)
            if time.monotonic() - started > {PATIENCE}:
                sys.exit(9)   # the cancel never came: a bound, so the test cannot hang
            time.sleep(0.001)
        try:
{textwrap.indent(body, " " * 12)}
        except headway.Canceled as canceled:
            print("canceled", canceled.task_id, flush=True)
    """
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(code))
    job = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "HEADWAY_URL": headwayd})
    try:
        assert job.stdout.readline() == "started\n"
        tasks = wait_until(lambda: all_tasks(headwayd), "the task")
        task_id = tasks[0]["id"]
        reply = httpx.post(f"{headwayd}/v1/tasks/{task_id}/cancel", headers={"Content-Type": "application/json"})
        assert reply.status_code == 202, reply.text
        assert job.wait(timeout=PATIENCE) == 0, job.stderr.read()
        assert job.stdout.read() == f"canceled {task_id}\n"
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    stored = task(headwayd, task_id)
    assert stored["state"] == "canceled"
    assert stored["completed"] > 0


UNMODIFIED_SCRIPT = """
    import sys
    from tqdm import tqdm, trange
    from tqdm.auto import tqdm as auto_tqdm

    for epoch in trange(2, desc="epochs"):
        for batch in auto_tqdm(range(30), desc="batches", leave=False):
            pass
    bar = tqdm(total=5, desc="manual", disable=True)
    for _ in range(5):
        bar.update()
    bar.set_postfix(loss=0.25)
    bar.close()
    print("arguments", *sys.argv[1:])
"""


def tree(tasks):
    """{name: [child names, sorted]} of `tasks`, and the roots' names."""
    by_id = {t["id"]: t for t in tasks}
    children = {}
    for t in tasks:
        if t["parent_id"]:
            children.setdefault(by_id[t["parent_id"]]["name"], []).append(t["name"])
    return {name: sorted(names) for name, names in children.items()}, sorted(t["name"] for t in tasks if not t["parent_id"])


def test_an_unmodified_tqdm_script_reports_through_python_m_headway_run(headwayd, tmp_path):
    result = run_job(tmp_path, UNMODIFIED_SCRIPT, headwayd, arguments=["--fast", "x"], module_run=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "arguments --fast x\n"
    assert "epochs" in result.stderr  # tqdm still draws
    tasks = all_tasks(headwayd)
    children, roots = tree(tasks)
    assert roots == ["job.py --fast x"]
    assert children == {"job.py --fast x": ["epochs", "manual"], "epochs": ["batches", "batches"]}
    assert {t["state"] for t in tasks} == {"succeeded"}
    by_name = {t["name"]: t for t in tasks}
    assert by_name["manual"]["completed"] == 5 and by_name["manual"]["label"] == "loss=0.25"
    assert by_name["epochs"]["completed"] == 2


def test_headway_patch_tqdm_reports_every_bar_of_any_interpreter(headwayd, tmp_path):
    result = run_job(tmp_path, UNMODIFIED_SCRIPT, headwayd, env={"HEADWAY_PATCH_TQDM": "1"})
    assert result.returncode == 0, result.stderr
    children, roots = tree(all_tasks(headwayd))
    assert roots == ["epochs", "manual"]
    assert children == {"epochs": ["batches", "batches"]}


def test_without_headway_patch_tqdm_an_unmodified_script_reports_nothing(headwayd, tmp_path):
    result = run_job(tmp_path, UNMODIFIED_SCRIPT, headwayd)
    assert result.returncode == 0, result.stderr
    assert all_tasks(headwayd) == []


def test_nested_bars_become_a_tree_under_the_task_of_the_block(headwayd, tmp_path):
    # Three levels by position, bars in worker threads at fixed positions under the
    # outermost bar, a bar used again with reset() (each round a task of its own), all
    # inside a `with Task(...)` block whose task is their root.
    result = run_job(tmp_path, """
        import io, threading, headway
        quiet = dict(file=io.StringIO())
        with headway.Task("training", id="training"):
            for epoch in headway.tqdm(range(2), desc="epochs", **quiet):
                for shard in headway.tqdm(range(2), desc="shards", leave=False, **quiet):
                    for _ in headway.tqdm(range(3), desc="files", leave=False, **quiet):
                        pass
            overall = headway.tqdm(total=2, desc="workers", position=0, **quiet)
            def work(i):
                with headway.tqdm(total=4, desc=f"worker {i}", position=i + 1, **quiet) as bar:
                    bar.update(4)
                overall.update()
            threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
            for thread in threads: thread.start()
            for thread in threads: thread.join()
            overall.close()
            inner = headway.tqdm(total=3, desc="round", **quiet)
            for _ in range(2):
                inner.reset(total=3)
                inner.update(3)
            inner.close()
        assert headway.flush(30)
    """, headwayd)
    assert result.returncode == 0, result.stderr
    tasks = all_tasks(headwayd)
    children, roots = tree(tasks)
    assert roots == ["training"]
    assert children == {
        "training": ["epochs", "round", "round", "workers"],
        "epochs": ["shards", "shards"],
        "shards": ["files"] * 4,
        "workers": ["worker 0", "worker 1"],
    }
    assert {t["state"] for t in tasks} == {"succeeded"}
    assert task(headwayd, "training")["fraction"] == 1


def test_a_failed_block_finishes_failed_with_the_exception_and_its_traceback(headwayd, tmp_path):
    result = run_job(tmp_path, """
        import headway
        def load(row):
            raise ValueError(f"bad date in row {row}")
        with headway.Task("import", id="import", total=10) as task:
            for row in headway.track(range(10), "rows"):
                task.update()
                if row == 3:
                    load(row)
    """, headwayd)
    assert result.returncode == 1
    assert "ValueError: bad date in row 3" in result.stderr
    stored = task(headwayd, "import")
    assert stored["state"] == "failed"
    assert stored["message"].startswith("ValueError: bad date in row 3")
    assert "in load" in tail_text(headwayd, stored)
    rows = [t for t in all_tasks(headwayd) if t["name"] == "rows"][0]
    assert rows["state"] == "failed" and rows["completed"] == 3


def tail_text(base, stored):
    """The traceback lines of a failed task: its output tail where the server keeps
    one, else the message (a server without the tail gets them there)."""
    reply = httpx.get(f"{base}/v1/tasks/{stored['id']}/output")
    if reply.status_code == 200:
        return "\n".join(line["line"] for line in reply.json()["lines"])
    return stored["message"]


def test_an_uncaught_exception_in_a_script_fails_its_run_task(headwayd, tmp_path):
    result = run_job(tmp_path, """
        from tqdm import tqdm
        for i in tqdm(range(10), desc="steps"):
            if i == 4:
                raise RuntimeError("disk full")
    """, headwayd, module_run=True)
    assert result.returncode == 1
    assert "RuntimeError: disk full" in result.stderr
    by_name = {t["name"]: t for t in all_tasks(headwayd)}
    assert by_name["job.py"]["state"] == "failed"
    assert by_name["job.py"]["message"].startswith("RuntimeError: disk full")
    assert by_name["steps"]["state"] == "failed"


def test_a_loop_never_waits_for_a_server_that_does_not_answer(tmp_path):
    # A listener that never accepts: connections complete in the kernel's backlog and
    # no reply ever comes, so each request of the reporter waits for its timeout.
    with socket.create_server(("127.0.0.1", 0), backlog=64) as silent:
        port = silent.getsockname()[1]
        result = run_job(tmp_path, """
            import json, time, headway
            from headway import _reporter
            started = time.monotonic()
            for _ in headway.track(range(200_000), "unanswered"):
                pass
            print(json.dumps({"seconds": time.monotonic() - started,
                              "delivered": headway.flush(0)}))
        """, f"http://127.0.0.1:{port}", env={"HEADWAY_TIMEOUT": "30", "HEADWAY_EXIT_TIMEOUT": "1"})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # The loop ended while the first request still waited (30 s): it never waited.
    assert report["delivered"] is False
    assert report["seconds"] < 10
    assert "could not deliver the final state" in result.stderr


def test_a_job_without_any_server_finishes_and_warns_once(tmp_path):
    result = run_job(tmp_path, """
        import headway
        with headway.Task("offline"):
            for _ in headway.track(range(1000)):
                pass
        print("finished")
    """, f"http://127.0.0.1:{free_port()}", env={"HEADWAY_EXIT_TIMEOUT": "1"})
    assert result.returncode == 0
    assert result.stdout == "finished\n"
    assert result.stderr.count("headway: cannot reach") == 1, result.stderr


def test_several_tasks_go_in_one_batch(headwayd, tmp_path):
    result = run_job(tmp_path, """
        import json, headway
        from headway import _reporter
        tasks = [headway.Task(f"shard {i}", id=f"shard-{i:02}", total=100) for i in range(60)]
        assert headway.flush(30)
        before = dict(_reporter.shared_reporter().sent)
        for task in tasks:
            task.progress(completed=50, label="halfway")
        assert headway.flush(30)
        after = _reporter.shared_reporter().sent
        print(json.dumps({"batches": after["batch"] - before["batch"], "items": after["items"] - before["items"]}))
        for task in tasks:
            task.finish()
    """, headwayd)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == {"batches": 1, "items": 60}
    assert {(t["completed"], t["state"]) for t in all_tasks(headwayd)} == {(100, "succeeded")}


def make_token(database, *arguments):
    result = subprocess.run([HEADWAYD, "token", "create", "--db", str(database), *arguments],
                            capture_output=True, text=True, check=True)
    return result.stdout.strip().splitlines()[-1]


def test_headway_token_and_task_prefix_as_the_cli_reads_them(tmp_path):
    database = tmp_path / "server" / "headway.db"
    database.parent.mkdir()
    reader = make_token(database, "--scope", "read")
    runner = make_token(database, "--scope", "report", "--task-prefix", "team-a.")
    port = free_port()
    with open(tmp_path / "log", "w") as log, daemon_on(port, database, log):
        base = f"http://127.0.0.1:{port}"
        result = run_job(tmp_path, """
            import headway
            with headway.Task("nightly", id="nightly"):
                for _ in headway.track(range(10), "files"):
                    pass
        """, base, env={"HEADWAY_TOKEN": runner, "HEADWAY_TASK_PREFIX": "team-a."})
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        tasks = all_tasks(base, token=reader)
        assert sorted(t["id"].startswith("team-a.") for t in tasks) == [True, True]
        assert task(base, "team-a.nightly", token=reader)["state"] == "succeeded"


def wheel():
    """The wheel `make` built (clients/python/dist), or HEADWAY_PYTHON_WHEEL."""
    named = os.environ.get("HEADWAY_PYTHON_WHEEL")
    if named:
        return named
    built = sorted(glob.glob(str(ROOT / "clients/python/dist/headway-*.whl")), key=os.path.getmtime)
    assert built, "no wheel in clients/python/dist: `make python-client` builds it"
    return built[-1]


def test_a_fresh_venv_without_tqdm_reports_with_track(headwayd, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=PATIENCE)
    python = str(venv / "bin/python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", wheel()],
                   check=True, timeout=PATIENCE)
    result = run_job(tmp_path, """
        import headway
        try:
            import tqdm
        except ImportError:
            print("no tqdm")
        try:
            headway.tqdm
        except ImportError as error:
            print(error)
        for _ in headway.track(range(500), "without tqdm"):
            pass
    """, headwayd, python=python, env={"HEADWAY_PATCH_TQDM": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "no tqdm", "headway.tqdm needs tqdm (pip install tqdm); headway.track works without it"]
    (stored,) = all_tasks(headwayd)
    assert (stored["name"], stored["completed"], stored["state"]) == ("without tqdm", 500, "succeeded")


def test_texts_and_ids_the_server_would_refuse_are_made_acceptable(headwayd, tmp_path):
    result = run_job(tmp_path, r"""
        import headway
        broken = b"caf\xe9".decode("utf-8", "surrogateescape")
        with headway.Task("name\0with nul " + broken, id="celery id/with spaces", total=3) as task:
            task.progress(increment=1, label="   ")
            task.progress(increment=1, label="label " + broken, output=["line\0one", broken])
            task.progress(increment=1, label="x" * 600)
    """, headwayd)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    stored = task(headwayd, "celery-id-with-spaces")
    assert stored["name"] == "namewith nul caf\ufffd"
    assert stored["label"] == "x" * 500
    assert (stored["completed"], stored["state"]) == (3, "succeeded")


def run_until_canceled(base, tmp_path, code, cancel_id, module_run=False, arguments=()):
    """Starts `code` (it prints "started" once its loop runs), asks the server to cancel
    `cancel_id` once the task exists, and returns the finished process's (status,
    stdout, stderr)."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(code))
    command = [sys.executable, *(["-m", "headway", "run", *arguments] if module_run else []), str(script)]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "HEADWAY_URL": base})
    try:
        assert job.stdout.readline() == "started\n"
        wait_until(lambda: any(t["id"] == cancel_id for t in all_tasks(base)), "the task")
        reply = httpx.post(f"{base}/v1/tasks/{cancel_id}/cancel", headers={"Content-Type": "application/json"})
        assert reply.status_code == 202, reply.text
        status = job.wait(timeout=PATIENCE)
        return status, job.stdout.read(), job.stderr.read()
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


ENDLESS_TQDM = f"""
    import itertools, sys, time
    from tqdm import tqdm
    started = time.monotonic()
    for n in tqdm(itertools.count(), desc="endless"):
        if n == 0:
            print("started", flush=True)
        if time.monotonic() - started > {PATIENCE}:
            sys.exit(9)   # the cancel never came: a bound, so the test cannot hang
        time.sleep(0.001)
"""


def test_a_cancel_of_the_run_task_stops_an_unmodified_script(headwayd, tmp_path):
    status, _, stderr = run_until_canceled(headwayd, tmp_path, ENDLESS_TQDM, "the-run", module_run=True,
                                           arguments=["--id", "the-run"])
    assert status == 3, stderr
    assert "was asked to cancel" in stderr
    by_name = {t["name"]: t for t in all_tasks(headwayd)}
    assert by_name["job.py"]["state"] == "canceled"
    assert by_name["endless"]["state"] == "canceled"


def test_a_job_that_finishes_its_task_itself_after_a_cancel_keeps_its_outcome(headwayd, tmp_path):
    status, stdout, stderr = run_until_canceled(headwayd, tmp_path, f"""
        import sys, time, headway
        task = headway.Task("batch", id="batch")
        started = time.monotonic()
        try:
            while time.monotonic() - started < {PATIENCE}:
                task.update()
                if task.completed == 1:
                    print("started", flush=True)
                time.sleep(0.001)
        except headway.Canceled:
            task.finish("succeeded", "the batch was finished first")
    """, "batch")
    assert status == 0, stderr
    stored = task(headwayd, "batch")
    assert (stored["state"], stored["message"]) == ("succeeded", "the batch was finished first")


def server_has_output_tail(base):
    reply = httpx.post(f"{base}/v1/tasks", json={"id": "probe-output", "name": "probe"})
    assert reply.status_code == 201
    return "last_output" in reply.json()


OUTPUT_JOB = """
    import json, headway
    from headway import _reporter
    with headway.Task("talks", id="talks", total=3) as task:
        task.progress(increment=1, output=["first line", "second line"])
        assert headway.flush(30)
        task.heartbeat(label="waiting", output="third line\\nfourth line")
        task.progress(increment=1, output=["fifth line"])
        assert headway.flush(30)
        task.update()
    assert headway.flush(30)
    print(json.dumps({"accepts_output": _reporter.shared_reporter().accepts_output}))
"""


def test_output_lines_reach_the_task_output_tail(headwayd, tmp_path):
    if not server_has_output_tail(headwayd):
        pytest.skip("this daemon has no output tail yet (issue 46)")
    result = run_job(tmp_path, OUTPUT_JOB, headwayd)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"accepts_output": True}
    lines = httpx.get(f"{headwayd}/v1/tasks/talks/output").json()["lines"]
    assert [line["line"] for line in lines] == ["first line", "second line", "third line", "fourth line", "fifth line"]
    stored = task(headwayd, "talks")
    assert (stored["completed"], stored["state"], stored["last_output"]) == (3, "succeeded", "fifth line")


def test_an_older_server_without_the_output_tail_gets_everything_else(headwayd, tmp_path):
    if server_has_output_tail(headwayd):
        pytest.skip("this daemon has the output tail: nothing to fall back from")
    result = run_job(tmp_path, OUTPUT_JOB, headwayd)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert json.loads(result.stdout) == {"accepts_output": False}
    stored = task(headwayd, "talks")
    assert (stored["completed"], stored["state"], stored["label"]) == (3, "succeeded", "waiting")


def test_run_time_rules_reach_the_server(headwayd, tmp_path):
    """`expected`, `deadline` and `minimum` are registered as the run-time rules: a backup
    that succeeds at once is flagged too quick."""
    result = run_job(tmp_path, """
        import datetime, headway
        deadline = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)
        with headway.Task("Nightly backup", id="backup", expected=3600, deadline=deadline, minimum=600):
            pass
        headway.flush()
    """, headwayd)
    assert result.returncode == 0, result.stderr
    stored = wait_until(lambda: (t := task(headwayd, "backup"))["state"] == "succeeded" and t, "the finish")
    assert (stored["expected_seconds"], stored["min_seconds"]) == (3600, 600)
    assert stored["deadline"] is not None and stored["overdue"] is False
    assert stored["too_quick"] is True
