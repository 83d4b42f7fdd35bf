"""Faults of the PostgreSQL server under two daemons sharing it, on a real server of the
test's own: the server stopped and started again (`pg_ctl stop -m fast`, then `start`),
and restarted (`pg_ctl restart -m fast`), under a bounded load of progress updates; one
session ended by `pg_terminate_backend`; the server down when a daemon starts.

What must hold: while the server is down every request that needs it is answered 503
`database_unavailable` with `Retry-After` (never 500, never a hang, never a crash); once
it is back both daemons work again by themselves (the writer connects again, the
listener listens again, one daemon leads); every acknowledged update is stored; every
subscriber, on either daemon, resuming with Last-Event-ID when cut, sees ids strictly
increasing, each task's state only moving forward, and ends with what is stored."""
import contextlib
import json
import re
import subprocess
import threading
import time

import httpx
import pytest

from conftest import HEADWAYD, free_port, run_headwayd, wait_for_port
from pgserver import PostgresServer

# How the advisory lock of the leader shows in pg_locks (Leadership.lockKey in two halves).
LEADER_LOCK = ("select count(*) from pg_locks where locktype = 'advisory' and granted "
               "and classid::bigint = 1214603620 and objid::bigint = 2002876674")

# The longest a request may take, fault or not: the daemon answers within libpq's connect
# timeout (10 s) at worst; a reply slower than this is a hang.
REQUEST_DEADLINE = 10.0


def wait_until(condition, what, attempts=400, pause=0.05):
    """Polls `condition` until it is true (bounded); fails naming `what` otherwise."""
    for _ in range(attempts):
        if condition():
            return
        time.sleep(pause)
    pytest.fail(f"never happened: {what}")


def log_of(directory):
    return (directory / "headwayd.log").read_text()


class Replies:
    """Every reply the load got, by daemon, with when it came; thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen = []  # (time, base, method, path, status, code, retry_after, seconds)
        self.failures = []  # (base, method, path, what went wrong: a timeout, a dropped connection)

    def call(self, client, base, method, path, **arguments):
        """Sends one request; records its reply (or its failure); returns the reply or None."""
        start = time.monotonic()
        try:
            reply = client.request(method, base + path, **arguments)
        except httpx.HTTPError as error:
            with self.lock:
                self.failures.append((base, method, path, repr(error), time.monotonic() - start))
            return None
        code = None
        if reply.headers.get("content-type", "").startswith("application/problem+json"):
            code = reply.json().get("code")
        with self.lock:
            self.seen.append((time.monotonic(), base, method, re.sub(r"/t\d+", "/T", path), reply.status_code, code,
                              reply.headers.get("Retry-After"), time.monotonic() - start))
        return reply

    def refusals(self, since=0.0):
        with self.lock:
            return [entry for entry in self.seen if entry[0] >= since and entry[4] >= 300]

    def kinds_of_refusal(self):
        """Each distinct (method, path, status, code, Retry-After) of the replies that were not 2xx."""
        with self.lock:
            return sorted({entry[2:7] for entry in self.seen if entry[4] >= 300}, key=str)


class Load:
    """Runners on threads of their own, each reporting the progress of its task to one of
    the daemons (`increment` 1 with the next `seq`, resent with the same `seq` until
    acknowledged), and readers asking for a task and a listing; `acknowledged` holds each
    task's last acknowledged `seq` (= its `completed`)."""

    def __init__(self, bases, tasks_per_daemon=2):
        self.replies = Replies()
        self.acknowledged = {}
        self.stop = threading.Event()
        self.threads = []
        self.tasks = {f"t{n}": bases[n % len(bases)] for n in range(tasks_per_daemon * len(bases))}
        with httpx.Client(timeout=REQUEST_DEADLINE) as client:
            for task, base in self.tasks.items():
                assert client.post(f"{base}/v1/tasks", json={"id": task, "name": task, "total": 10**9}).status_code == 201
                self.acknowledged[task] = 0
        for task, base in self.tasks.items():
            self.threads.append(threading.Thread(target=self._runner, args=(base, task)))
        for base in bases:
            self.threads.append(threading.Thread(target=self._reader, args=(base,)))
        for thread in self.threads:
            thread.start()

    def _runner(self, base, task):
        with httpx.Client(timeout=REQUEST_DEADLINE) as client:
            seq = 0
            while not self.stop.is_set():
                seq += 1
                # The last seq sent is resent until acknowledged even after the stop (bounded),
                # so that the stored value is the last one acknowledged.
                for _ in range(600):
                    reply = self.replies.call(client, base, "POST", f"/v1/tasks/{task}/progress",
                                              json={"increment": 1, "seq": seq})
                    if reply is not None and reply.status_code == 200:
                        assert reply.json()["completed"] == seq
                        self.acknowledged[task] = seq
                        break
                    time.sleep(0.05)

    def _reader(self, base):
        with httpx.Client(timeout=REQUEST_DEADLINE) as client:
            while not self.stop.is_set():
                self.replies.call(client, base, "GET", "/v1/tasks/t0")
                self.replies.call(client, base, "GET", "/v1/tasks?page_size=5")
                time.sleep(0.02)

    def acknowledged_since(self, counts):
        return {task: self.acknowledged[task] - counts[task] for task in counts}

    def finish(self):
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in self.threads), "a runner never got its last update acknowledged"


class Watcher:
    """A subscriber of `base`'s event stream on a thread of its own, resuming with
    Last-Event-ID whenever the stream ends or it is `cut`: `events` holds (id, task,
    completed) in arrival order, `view` each task's `completed` as the events tell it,
    `connections` how many times the stream was opened, `refusals` the resumes refused,
    `ended_empty` the `retry:` of each stream the daemon ended before any event."""

    def __init__(self, base):
        self.base, self.events, self.view, self.connections = base, [], {}, 0
        self.last_id = None
        self.refusals = []  # (status, code, Retry-After) of each resume refused
        self.ended_empty = []  # the `retry:` of each stream the daemon ended before any event (None: none)
        self.stop, self.cut = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            headers = {"Last-Event-ID": str(self.last_id)} if self.last_id is not None else {}
            with contextlib.suppress(httpx.HTTPError), httpx.Client(timeout=httpx.Timeout(10.0, read=5.0)) as client, \
                    client.stream("GET", f"{self.base}/v1/events", headers=headers) as stream:
                if stream.status_code != 200:
                    stream.read()
                    self.refusals.append((stream.status_code, json.loads(stream.text).get("code"),
                                          stream.headers.get("Retry-After")))
                    time.sleep(0.2)
                    continue
                self.connections += 1
                event_id, retry, had_event, left = None, None, False, False
                for line in stream.iter_lines():
                    if self.stop.is_set():
                        return
                    if self.cut.is_set():  # the client leaves, to resume (heartbeats come every second)
                        self.cut.clear()
                        left = True
                        break
                    if line.startswith("retry:"):
                        retry = int(line[6:])
                    elif line.startswith("id:"):
                        event_id = int(line[3:])
                    elif line.startswith("data:"):
                        had_event = True
                        data = json.loads(line[5:])
                        for task in data.get("tasks", [data]):
                            if "completed" in task:
                                self.view[task["id"]] = task["completed"]
                                self.events.append((event_id, task["id"], task["completed"]))
                        if "tasks" in data:
                            self.events.append((event_id, "snapshot", None))
                        self.last_id = event_id
                if not left and not had_event:
                    self.ended_empty.append(retry)
            time.sleep(0.05)

    def check_order(self):
        """Ids strictly increasing (no duplicate), and each task's `completed` only moving
        forward, over the whole run, across every resume."""
        ids = [event_id for event_id, task, _ in self.events if task != "snapshot"]
        snapshots = [event_id for event_id, task, _ in self.events if task == "snapshot"]
        assert len(snapshots) == 1, f"{self.base}: a resume got a fresh snapshot instead of the changes: {snapshots}"
        assert all(earlier < later for earlier, later in zip(ids, ids[1:])), \
            f"{self.base}: ids not strictly increasing: {[(a, b) for a, b in zip(ids, ids[1:]) if a >= b][:5]}"
        assert not ids or ids[0] > snapshots[0]
        latest = {}
        for event_id, task, completed in self.events:
            if task == "snapshot":
                continue
            assert completed > latest.get(task, -1), f"{self.base}: {task} went from {latest.get(task)} to {completed}"
            latest[task] = completed


def stored_tasks(server, database):
    return {task: int(completed) for task, completed in
            (line.split("|") for line in server.psql("select id, completed from tasks", database).split())}


def leader_locks(server, database):
    return int(server.psql(LEADER_LOCK, database))


def check_refusals_while_down(load):
    """Every reply that was not 2xx is 503 `database_unavailable` with `Retry-After`, none
    came later than the deadline, and no request failed without a reply."""
    kinds = load.replies.kinds_of_refusal()
    assert {(status, code, retry) for _, _, status, code, retry in kinds} <= {(503, "database_unavailable", "2")}, kinds
    assert load.replies.failures == []
    assert max(entry[7] for entry in load.replies.seen) < REQUEST_DEADLINE


def test_a_server_stopped_and_restarted_under_load_is_503_meanwhile_and_the_daemons_recover_exactly(tmp_path):
    with PostgresServer(tmp_path / "server") as server:
        server.create_database("faults")
        url = server.url("faults")
        with run_headwayd(tmp_path / "a", "--durability", "full", db=url) as a, \
                run_headwayd(tmp_path / "b", "--durability", "full", db=url) as b:
            watchers = [Watcher(a), Watcher(b)]
            wait_until(lambda: all(watcher.connections == 1 for watcher in watchers), "both subscribers connected")
            load = Load([a, b])
            try:
                wait_until(lambda: min(load.acknowledged.values()) > 20, "the runners run")

                # 1. The server stopped (fast: clients are disconnected) while the load goes on.
                down_at = time.monotonic()
                server.stop()
                # Each subscriber leaves and resumes while the server is down: the resume's
                # catch-up needs the database.
                for watcher in watchers:
                    watcher.cut.set()
                wait_until(lambda: all(watcher.refusals or watcher.connections > 1 for watcher in watchers),
                           "the subscribers' resumes are answered")
                for base in (a, b):
                    for method in ("POST", "GET"):
                        wait_until(lambda: sum(1 for entry in load.replies.refusals(down_at)
                                               if entry[1] == base and entry[2] == method) >= 3,
                                   f"{base} refuses {method} while the server is down")
                # The monitoring still hears from each daemon, which says the database is gone.
                for base in (a, b):
                    ready = httpx.get(f"{base}/readyz", timeout=REQUEST_DEADLINE)
                    assert ready.status_code == 503 and "Retry-After" in ready.headers, ready.text
                    metrics = httpx.get(f"{base}/metrics", timeout=REQUEST_DEADLINE)
                    assert metrics.status_code == 200, metrics.text
                    assert re.search(r"^headway_database_available 0$", metrics.text, re.M), metrics.text
                    assert "headway_tasks{" not in metrics.text
                counts = dict(load.acknowledged)
                server._check(server._server_command("pg_ctl", "start", "-w", "-t", "60", "-D",
                                                     str(server.data_directory), "-l", str(server.log_file)),
                              "pg_ctl start")
                # Both daemons take updates again by themselves, within a bound.
                wait_until(lambda: min(load.acknowledged_since(counts).values()) >= 5,
                           "every runner's updates are acknowledged again", attempts=600)

                # 2. `pg_ctl restart -m fast` as an operator types it.
                counts = dict(load.acknowledged)
                server._check(server._server_command("pg_ctl", "restart", "-w", "-t", "60", "-m", "fast", "-D",
                                                     str(server.data_directory), "-l", str(server.log_file)),
                              "pg_ctl restart")
                wait_until(lambda: min(load.acknowledged_since(counts).values()) >= 5,
                           "every runner's updates are acknowledged after the restart", attempts=600)
            finally:
                load.finish()

            check_refusals_while_down(load)
            stored = stored_tasks(server, "faults")
            assert {task: stored[task] for task in load.acknowledged} == load.acknowledged
            wait_until(lambda: leader_locks(server, "faults") == 1, "one daemon leads again", attempts=600)

            # The listener of each daemon listens again: a change made on one reaches the
            # other's subscriber, and each daemon says it listens again.
            for directory in (tmp_path / "a", tmp_path / "b"):
                wait_until(lambda: "database.listening" in log_of(directory), f"{directory.name} listens again")
            assert httpx.post(f"{a}/v1/tasks", json={"id": "after-a", "name": "After"}).status_code == 201
            assert httpx.post(f"{b}/v1/tasks", json={"id": "after-b", "name": "After"}).status_code == 201
            stored.update({"after-a": 0, "after-b": 0})
            for watcher in watchers:
                wait_until(lambda: watcher.view == stored, f"{watcher.base}'s subscriber ends with what is stored")
                watcher.stop.set()
            for watcher in watchers:
                watcher.check_order()
                # A resume whose catch-up could not be read ends with the problem's Retry-After
                # as `retry:` (the head, 200, was sent already), so that EventSource waits as long.
                assert set(watcher.refusals) <= {(503, "database_unavailable", "2")}, watcher.refusals
                assert set(watcher.ended_empty) <= {2000}, watcher.ended_empty
            # Nothing the outage did is an error of the daemon: no line at level error.
            for directory in (tmp_path / "a", tmp_path / "b"):
                assert [line for line in log_of(directory).splitlines() if "level=error" in line] == []

            # What an operator reads in /metrics: the connections made again, and how long
            # the writer found the database unavailable.
            for base in (a, b):
                metrics = httpx.get(f"{base}/metrics").text
                reconnects = re.search(r"^headway_database_reconnects_total (\S+)$", metrics, re.M)
                unavailable = re.search(r"^headway_database_unavailable_seconds_total (\S+)$", metrics, re.M)
                assert reconnects and float(reconnects.group(1)) >= 2, metrics
                assert unavailable and float(unavailable.group(1)) > 0, metrics
                assert re.search(r"^headway_database_available 1$", metrics, re.M), metrics


def test_a_session_ended_by_pg_terminate_backend_is_made_again_and_loses_nothing(tmp_path):
    with PostgresServer(tmp_path / "server") as server:
        server.create_database("faults")
        url = server.url("faults")
        with run_headwayd(tmp_path / "a", "--durability", "full", db=url) as a, \
                run_headwayd(tmp_path / "b", "--durability", "full", db=url) as b:
            watchers = [Watcher(a), Watcher(b)]
            wait_until(lambda: all(watcher.connections == 1 for watcher in watchers), "both subscribers connected")
            load = Load([a, b])
            try:
                wait_until(lambda: min(load.acknowledged.values()) > 20, "the runners run")
                sessions = server.psql("select pid from pg_stat_activity where datname = 'faults' "
                                       "and pid <> pg_backend_pid() order by backend_start", "faults").split()
                # Each daemon's sessions, one at a time, while the load goes on: the writer's,
                # the listener's, the leader's, the readers'.
                for pid in sessions:
                    counts = dict(load.acknowledged)
                    assert server.psql(f"select pg_terminate_backend({pid})", "faults").strip() == "t"
                    connections = [watcher.connections for watcher in watchers]
                    for watcher in watchers:
                        watcher.cut.set()
                    wait_until(lambda: all(watcher.connections > opened for watcher, opened in zip(watchers, connections)),
                               "the subscribers resumed")
                    wait_until(lambda: min(load.acknowledged_since(counts).values()) >= 3,
                               f"every runner goes on after session {pid} ended", attempts=600)
            finally:
                load.finish()
            check_refusals_while_down(load)
            stored = stored_tasks(server, "faults")
            assert {task: stored[task] for task in load.acknowledged} == load.acknowledged
            wait_until(lambda: leader_locks(server, "faults") == 1, "one daemon leads again", attempts=600)
            for watcher in watchers:
                wait_until(lambda: watcher.view == stored, f"{watcher.base}'s subscriber ends with what is stored")
                watcher.stop.set()
            for watcher in watchers:
                watcher.check_order()
                assert watcher.refusals == []
            for directory in (tmp_path / "a", tmp_path / "b"):
                assert [line for line in log_of(directory).splitlines() if "level=error" in line] == []


def test_a_daemon_started_while_the_server_is_down_waits_for_it_and_then_serves(tmp_path):
    with PostgresServer(tmp_path / "server") as server:
        server.create_database("faults")
        url = server.url("faults")
        server.stop()
        port = free_port()
        with open(tmp_path / "headwayd.log", "w") as log:
            process = subprocess.Popen([HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", url], stderr=log)
            try:
                wait_until(lambda: "database.waiting" in (tmp_path / "headwayd.log").read_text(),
                           "the daemon says it waits for the database")
                assert process.poll() is None
                server._check(server._server_command("pg_ctl", "start", "-w", "-t", "60", "-D",
                                                     str(server.data_directory), "-l", str(server.log_file)),
                              "pg_ctl start")
                wait_for_port(port, process, "headwayd")
                assert httpx.post(f"http://127.0.0.1:{port}/v1/tasks",
                                  json={"id": "late", "name": "Late"}).status_code == 201
            finally:
                process.terminate()
                assert process.wait(timeout=20) == 0


def test_a_daemon_waiting_for_the_server_stops_at_once_on_sigterm(tmp_path):
    with PostgresServer(tmp_path / "server") as server:
        server.create_database("faults")
        server.stop()
        with open(tmp_path / "headwayd.log", "w") as log:
            process = subprocess.Popen([HEADWAYD, "--listen", "127.0.0.1:0", "--db", server.url("faults")], stderr=log)
            try:
                wait_until(lambda: "database.waiting" in (tmp_path / "headwayd.log").read_text(),
                           "the daemon says it waits for the database")
                process.terminate()
                # Well within --db-start-wait (60 s) and systemd's TimeoutStopSec (20 s).
                assert process.wait(timeout=10) == 0
            finally:
                process.kill()
        assert "stopped while waiting for the database server" in (tmp_path / "headwayd.log").read_text()


def test_a_daemon_stops_cleanly_while_the_server_is_down(tmp_path):
    with PostgresServer(tmp_path / "server") as server:
        server.create_database("faults")
        # run_headwayd asserts a clean stop (status 0 within 20 s) when its block ends, here
        # with the server down and a subscriber still connected (closed after the stop).
        with contextlib.ExitStack() as subscriber, run_headwayd(tmp_path / "a", db=server.url("faults")) as a:
            assert httpx.post(f"{a}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
            client = subscriber.enter_context(httpx.Client(timeout=REQUEST_DEADLINE))
            assert subscriber.enter_context(client.stream("GET", f"{a}/v1/events")).status_code == 200
            server.stop()
            reply = httpx.post(f"{a}/v1/tasks/t/progress", json={"increment": 1, "seq": 1}, timeout=REQUEST_DEADLINE)
            assert (reply.status_code, reply.json()["code"]) == (503, "database_unavailable")
        assert "server.stopped" in log_of(tmp_path / "a")


def test_a_daemon_whose_database_does_not_exist_fails_at_once_even_when_it_would_wait(tmp_path):
    with PostgresServer(tmp_path / "server") as server:
        completed = subprocess.run([HEADWAYD, "--listen", "127.0.0.1:0", "--db", server.url("missing")],
                                   capture_output=True, text=True, timeout=60)
        assert completed.returncode == 1, completed.stderr
        assert 'database "missing" does not exist' in completed.stderr
        assert "database.waiting" not in completed.stderr
