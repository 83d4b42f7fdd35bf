"""Faults of the PostgreSQL server under two daemons sharing it, on a real server of the
test's own: the server stopped and started again (`pg_ctl stop -m fast`, then `start`),
and restarted (`pg_ctl restart -m fast`), under a bounded load of progress updates; one
session ended by `pg_terminate_backend`; the server down when a daemon starts, or when
`headwayd token create` runs; the network between a daemon and the server cut (a proxy
that turns into a black hole, `blackhole.py`), under load, while a statement awaits its
reply, and at start; the server frozen (SIGSTOP of every process, as a hung host or a
disk that stopped answering would: its kernel still accepts and acknowledges, nothing
answers), under load and while a daemon stops.

What must hold: while the server is down every request that needs it is answered 503
`database_unavailable` with `Retry-After` (never 500, never a hang, never a crash); once
it is back both daemons work again by themselves (the writer connects again, the
listener listens again, one daemon leads); every acknowledged update is stored; every
subscriber, on either daemon, resuming with Last-Event-ID when cut, sees ids strictly
increasing, each task's state only moving forward, and ends with what is stored."""
import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time

import httpx
import pytest

from blackhole import BlackHoleProxy
from conftest import HEADWAYD, free_port, run_headwayd, wait_for_port
from pgserver import PostgresServer

# How the advisory lock of the leader shows in pg_locks (Leadership.lockKey in two halves).
LEADER_LOCK = ("select count(*) from pg_locks where locktype = 'advisory' and granted "
               "and classid::bigint = 1214603620 and objid::bigint = 2002876674")

# The longest a request may take, fault or not: the daemon answers within libpq's connect
# timeout (10 s) at worst; a reply slower than this is a hang.
REQUEST_DEADLINE = 10.0

# The longest a request may take when the network to the server is cut: the batch in
# flight fails within the daemon's tcp_user_timeout (10 s; keepalives for a reply awaited
# in silence: first probe after 5 s, the connection ended about 10 s after the last word
# heard, 11 s measured), then the next batch's one connection attempt within
# connect_timeout (5 s; 16 s measured in all), with a margin for this loaded machine. On
# the kernel's own timeouts it would be about 15 minutes, or for ever.
CUT_DEADLINE = 25.0


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

    def __init__(self, bases, tasks_per_daemon=2, deadline=REQUEST_DEADLINE):
        self.deadline = deadline
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
        with httpx.Client(timeout=self.deadline) as client:
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
        with httpx.Client(timeout=self.deadline) as client:
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


# -- the network cut: a host gone, a cable pulled (nothing closed, nothing refused)

def socket_path(server):
    """The Unix socket of `server`, where the proxy forwards."""
    return server.directory / f".s.PGSQL.{server.port}"


def first_seen(watcher, task):
    """Polls until `watcher` has seen an event of `task` (bounded); returns when."""
    wait_until(lambda: task in watcher.view, f"{watcher.base}'s subscriber sees {task}", attempts=200)
    return time.monotonic()


def test_a_network_cut_between_a_daemon_and_the_server_is_503_within_a_bound_and_heals_exactly(tmp_path):
    with PostgresServer(tmp_path / "server") as server, BlackHoleProxy(socket_path(server)) as proxy, \
            contextlib.ExitStack() as daemons:
        server.create_database("faults")
        # Daemon a reaches the server through the proxy, daemon b by its socket; a starts
        # first and leads, so the cut takes the lead from it.
        a = daemons.enter_context(run_headwayd(tmp_path / "a", "--durability", "full", db=proxy.url("faults")))
        wait_until(lambda: "leadership.acquired" in log_of(tmp_path / "a"), "a leads")
        b = daemons.enter_context(run_headwayd(tmp_path / "b", "--durability", "full", db=server.url("faults")))
        watchers = [Watcher(a), Watcher(b)]
        wait_until(lambda: all(watcher.connections == 1 for watcher in watchers), "both subscribers connected")
        load = Load([a, b], deadline=CUT_DEADLINE + 10)
        b_tasks = [task for task, base in load.tasks.items() if base == b]
        try:
            wait_until(lambda: min(load.acknowledged.values()) > 20, "the runners run")

            cut_at = time.monotonic()
            proxy.cut()
            # a answers every request that needs the database 503, each within the bound.
            for method in ("POST", "GET"):
                wait_until(lambda: sum(1 for entry in load.replies.refusals(cut_at)
                                       if entry[1] == a and entry[2] == method) >= 3,
                           f"a refuses {method} while the network is cut", attempts=1200)
            ready = httpx.get(f"{a}/readyz", timeout=CUT_DEADLINE)
            assert ready.status_code == 503 and "Retry-After" in ready.headers, ready.text
            metrics = httpx.get(f"{a}/metrics", timeout=CUT_DEADLINE).text
            assert re.search(r"^headway_database_available 0$", metrics, re.M), metrics
            # b goes on: it takes the lead (the server ends a's idle session: its lock goes)
            # and its runners' updates are acknowledged (a's transaction cut short is ended
            # by the server, with the lock it held).
            wait_until(lambda: "leadership.acquired" in log_of(tmp_path / "b"), "b takes the lead", attempts=1200)
            counts = dict(load.acknowledged)
            wait_until(lambda: min(load.acknowledged_since(counts)[task] for task in b_tasks) >= 5,
                       "b's runners go on while a is cut off", attempts=1200)
            # a's listener and leader found their connections dead too.
            wait_until(lambda: "database.listen_failed" in log_of(tmp_path / "a"), "a's listener sees the cut",
                       attempts=1200)
            wait_until(lambda: "leadership.lost" in log_of(tmp_path / "a"), "a's leader sees the cut", attempts=1200)

            healed_at = time.monotonic()
            proxy.heal()
            counts = dict(load.acknowledged)
            wait_until(lambda: min(load.acknowledged_since(counts).values()) >= 5,
                       "every runner's updates are acknowledged again", attempts=1200)
            wait_until(lambda: "database.listening" in log_of(tmp_path / "a"), "a listens again", attempts=1200)
            print(f"a answers again {time.monotonic() - healed_at:.1f} s after the network came back")
        finally:
            load.finish()

        # Every reply of a during the cut was 503 database_unavailable with Retry-After,
        # none slower than the bound; b may have met a's lock (busy) before the server ended
        # a's session. No request went unanswered.
        refusals = {(entry[1], entry[4], entry[5], entry[6]) for entry in load.replies.refusals()}
        assert {(status, code, retry) for base, status, code, retry in refusals if base == a} \
            == {(503, "database_unavailable", "2")}, refusals
        assert {(status, code) for base, status, code, _ in refusals if base == b} <= {(503, "database_busy")}, refusals
        assert load.replies.failures == []
        slowest = max(entry[7] for entry in load.replies.seen if entry[1] == a)
        print(f"a's slowest reply: {slowest:.1f} s")
        assert slowest < CUT_DEADLINE

        stored = stored_tasks(server, "faults")
        assert {task: stored[task] for task in load.acknowledged} == load.acknowledged
        wait_until(lambda: leader_locks(server, "faults") == 1, "one daemon leads", attempts=600)

        # Changes cross between the daemons again, within the listener's second (plus this
        # machine's load), either way: a's LISTEN connection is a live one.
        for source, watcher in ((b, watchers[0]), (a, watchers[1])):
            task = f"after-{'b' if source == b else 'a'}"
            sent_at = time.monotonic()
            assert httpx.post(f"{source}/v1/tasks", json={"id": task, "name": "After"}).status_code == 201
            latency = first_seen(watcher, task) - sent_at
            print(f"{task} reached the other daemon's subscriber in {latency:.2f} s")
            assert latency < 3
            stored[task] = 0
        for watcher in watchers:
            wait_until(lambda: watcher.view == stored, f"{watcher.base}'s subscriber ends with what is stored")
            watcher.stop.set()
        for watcher in watchers:
            watcher.check_order()
            assert set(watcher.refusals) <= {(503, "database_unavailable", "2")}, watcher.refusals
        for directory in (tmp_path / "a", tmp_path / "b"):
            assert [line for line in log_of(directory).splitlines() if "level=error" in line] == []
        reconnects = re.search(r"^headway_database_reconnects_total (\S+)$", httpx.get(f"{a}/metrics").text, re.M)
        assert reconnects and float(reconnects.group(1)) >= 3


def test_a_statement_awaiting_its_reply_when_the_network_is_cut_fails_within_a_bound(tmp_path):
    """The cut comes after the statement was sent and acknowledged: nothing the daemon
    sends goes unacknowledged, only the reply never comes. Keepalives find it."""
    with PostgresServer(tmp_path / "server") as server, BlackHoleProxy(socket_path(server)) as proxy:
        server.create_database("faults")
        with run_headwayd(tmp_path / "a", "--durability", "full", db=proxy.url("faults")) as a:
            assert httpx.post(f"{a}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
            # An update waits for a lock the test holds (the server's lock_timeout is 5 s)...
            holder = subprocess.Popen([str(server.bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d",
                                       server.url("faults")], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      text=True, env=server._environment())
            holder.stdin.write("begin; lock table tasks in access exclusive mode; select 1;\n")
            holder.stdin.flush()
            waiting = "select count(*) from pg_locks where not granted and relation = 'tasks'::regclass"
            wait_until(lambda: int(server.psql("select count(*) from pg_locks where granted and mode = "
                                               "'AccessExclusiveLock' and relation = 'tasks'::regclass",
                                               "faults")) == 1, "the test holds the lock")
            reply = {}
            update = threading.Thread(target=lambda: reply.update(reply=httpx.post(
                f"{a}/v1/tasks/t/progress", json={"increment": 1, "seq": 1}, timeout=120)))
            update.start()
            try:
                wait_until(lambda: int(server.psql(waiting, "faults")) >= 1, "the update waits for the lock")
                # ...when the network is cut: its lock timeout's error never arrives.
                cut_at = time.monotonic()
                proxy.cut()
                update.join(timeout=120)
                took = time.monotonic() - cut_at
                print(f"the update awaiting its reply was answered {took:.1f} s after the cut")
                assert (reply["reply"].status_code, reply["reply"].json()["code"]) == (503, "database_unavailable")
                assert took < CUT_DEADLINE
            finally:
                holder.stdin.write("rollback;\n")
                holder.stdin.close()
                assert holder.wait(timeout=30) == 0
                update.join(timeout=120)
            proxy.heal()
            for _ in range(600):
                again = httpx.post(f"{a}/v1/tasks/t/progress", json={"increment": 1, "seq": 1}, timeout=CUT_DEADLINE)
                if again.status_code == 200:
                    break
                time.sleep(0.05)
            assert again.status_code == 200, again.text
            assert stored_tasks(server, "faults") == {"t": 1}


def test_a_daemon_cut_off_from_its_server_at_start_waits_as_db_start_wait_says(tmp_path):
    with PostgresServer(tmp_path / "server") as server, BlackHoleProxy(socket_path(server)) as proxy:
        server.create_database("faults")
        proxy.cut()
        # Gives up after --db-start-wait (3 s), and at most the connection attempt under way
        # then (connect_timeout, 5 s), and tries no more.
        started = time.monotonic()
        completed = subprocess.run([HEADWAYD, "--listen", "127.0.0.1:0", "--db", proxy.url("faults"),
                                    "--db-start-wait", "3"], capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
        print(f"gave up after {took:.1f} s")
        assert completed.returncode == 1, completed.stderr
        assert "takes no connections after a wait of 3 s (--db-start-wait): the server does not answer" \
            in completed.stderr
        assert 3 <= took < 3 + 5 + 4
        # Waits, and serves as soon as the network is back.
        port = free_port()
        with open(tmp_path / "headwayd.log", "w") as log:
            process = subprocess.Popen([HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", proxy.url("faults")],
                                       stderr=log)
            try:
                wait_until(lambda: "database.waiting" in (tmp_path / "headwayd.log").read_text(),
                           "the daemon says it waits for the database", attempts=400)
                proxy.heal()
                wait_for_port(port, process, "headwayd")
                assert httpx.post(f"http://127.0.0.1:{port}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
            finally:
                process.terminate()
                assert process.wait(timeout=20) == 0


# -- headwayd token create, run as a provisioning script does: right after starting the server

def token_create(url, *arguments):
    return subprocess.Popen([HEADWAYD, "token", "create", "--scope", "admin", "--db", url, *arguments],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_token_create_waits_for_a_server_still_starting_as_the_daemon_does(tmp_path):
    with PostgresServer(tmp_path / "server") as server:
        server.create_database("faults")
        url = server.url("faults")
        server.stop()
        process = token_create(url)
        try:
            # Its first line says what it waits for; nothing is on stdout yet.
            line = process.stderr.readline()
            assert "waiting for the database server at" in line and "gives up after 60 s" in line, line
            assert process.poll() is None
            server._check(server._server_command("pg_ctl", "start", "-w", "-t", "60", "-D",
                                                 str(server.data_directory), "-l", str(server.log_file)),
                          "pg_ctl start")
            stdout, stderr = process.communicate(timeout=30)
        finally:
            process.kill()
        assert process.returncode == 0, stderr
        secret = stdout.strip()
        assert secret.startswith("hw_") and "\n" not in secret
        assert server.psql("select count(*) from tokens where name = 'cli'", "faults").strip() == "1"

        # Told not to wait, it fails at once, saying why; SIGINT ends a wait (Ctrl-C).
        server.stop()
        process = token_create(url, "--db-start-wait", "0")
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 1, stderr
        assert "cannot create the token: the database server at" in stderr and "takes no connections: the server " \
            "does not answer" in stderr, stderr
        assert "waiting for" not in stderr
        process = token_create(url)
        try:
            assert "waiting for the database server" in process.stderr.readline()
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=5)
        finally:
            process.kill()
        assert process.returncode == 1 and "stopped by a signal while waiting for the database server" in stderr, stderr


def test_a_daemon_stops_cleanly_while_the_network_to_its_server_is_cut(tmp_path):
    with PostgresServer(tmp_path / "server") as server, BlackHoleProxy(socket_path(server)) as proxy:
        server.create_database("faults")
        # run_headwayd asserts a clean stop (status 0 within 20 s, systemd's TimeoutStopSec)
        # when its block ends, here with the network cut under a batch and a subscriber.
        with contextlib.ExitStack() as subscriber, run_headwayd(tmp_path / "a", db=proxy.url("faults")) as a:
            assert httpx.post(f"{a}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
            client = subscriber.enter_context(httpx.Client(timeout=CUT_DEADLINE))
            assert subscriber.enter_context(client.stream("GET", f"{a}/v1/events")).status_code == 200
            proxy.cut()

            def post_update():
                # The daemon may be stopping before the request reaches it (refused) or
                # while it waits (cut): either answer is fine, the stop is what is tested.
                with contextlib.suppress(httpx.TransportError):
                    httpx.post(f"{a}/v1/tasks/t/progress", json={"increment": 1}, timeout=CUT_DEADLINE)
            update = threading.Thread(target=post_update)
            update.start()
        update.join(timeout=CUT_DEADLINE)
        assert "server.stopped" in log_of(tmp_path / "a")


# -- the server frozen

# The longest a request may take while the server is frozen: the statement under way is
# given up after --db-timeout (1 s in these tests) and 5 s more of silence, then the next
# batch's one connection attempt waits connect_timeout (5 s: the postmaster's kernel
# accepts the connection, nothing answers it), with a margin for this loaded machine.
FREEZE_DEADLINE = 20.0


@contextlib.contextmanager
def frozen(server):
    """Stops every process of `server` (SIGSTOP) for the block, then lets them go on
    (SIGCONT) whatever happened: the postmaster forks no new session meanwhile."""
    postmaster = int((server.data_directory / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
    processes = [postmaster, *map(int, children)]
    for pid in processes:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def test_a_frozen_server_is_503_within_a_bound_and_the_daemon_recovers_exactly(tmp_path):
    with PostgresServer(tmp_path / "server") as server:
        server.create_database("faults")
        with run_headwayd(tmp_path / "a", "--durability", "full", "--db-timeout", "1",
                          db=server.url("faults")) as a:
            watcher = Watcher(a)
            wait_until(lambda: watcher.connections == 1, "the subscriber connected")
            load = Load([a], tasks_per_daemon=3, deadline=FREEZE_DEADLINE + 10)
            try:
                wait_until(lambda: min(load.acknowledged.values()) > 20, "the runners run")
                frozen_at = time.monotonic()
                with frozen(server):
                    # Every request that needs the database is answered 503, each within the bound.
                    for method in ("POST", "GET"):
                        wait_until(lambda: sum(1 for entry in load.replies.refusals(frozen_at)
                                               if entry[2] == method) >= 3,
                                   f"{method} refused while the server is frozen", attempts=1200)
                    ready = httpx.get(f"{a}/readyz", timeout=FREEZE_DEADLINE)
                    assert ready.status_code == 503 and "Retry-After" in ready.headers, ready.text
                    assert "sent nothing for 1 s (--db-timeout) and 5 s more" in log_of(tmp_path / "a")
                print(f"frozen for {time.monotonic() - frozen_at:.1f} s")
                thawed_at = time.monotonic()
                counts = dict(load.acknowledged)
                wait_until(lambda: min(load.acknowledged_since(counts).values()) >= 5,
                           "every runner's updates are acknowledged again", attempts=1200)
                print(f"answers again {time.monotonic() - thawed_at:.1f} s after the server went on")
            finally:
                load.finish()

            # Every refusal was 503 database_unavailable with Retry-After, none slower than the
            # bound, and no request went unanswered.
            refusals = {(entry[4], entry[5], entry[6]) for entry in load.replies.refusals()}
            assert refusals == {(503, "database_unavailable", "2")}, refusals
            assert load.replies.failures == []
            slowest = max(entry[7] for entry in load.replies.seen)
            print(f"slowest reply: {slowest:.1f} s")
            assert slowest < FREEZE_DEADLINE

            # Nothing acknowledged was lost, and the subscriber, resuming as it must, saw every
            # change in order and ends with what is stored.
            stored = stored_tasks(server, "faults")
            assert {task: stored[task] for task in load.acknowledged} == load.acknowledged
            wait_until(lambda: watcher.view == stored, "the subscriber ends with what is stored", attempts=600)
            watcher.stop.set()
            watcher.check_order()
            assert set(watcher.refusals) <= {(503, "database_unavailable", "2")}, watcher.refusals
            assert [line for line in log_of(tmp_path / "a").splitlines() if "level=error" in line] == []


def test_a_daemon_stops_cleanly_while_its_server_is_frozen(tmp_path):
    """At the default --db-timeout (10 s, and 5 s more of silence): a stopping daemon gives
    a frozen server 7 s (a lock wait's 5 s and 2 s more), not 15, then 2 s to each
    statement after the first given up."""
    with PostgresServer(tmp_path / "server") as server:
        server.create_database("faults")
        update = None
        # run_headwayd asserts a clean stop (status 0 within 20 s, systemd's TimeoutStopSec)
        # when its block ends, here with the server frozen under a batch and a subscriber.
        with frozen_later(server) as freeze, contextlib.ExitStack() as subscriber, \
                run_headwayd(tmp_path / "a", db=server.url("faults")) as a:
            assert httpx.post(f"{a}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
            client = subscriber.enter_context(httpx.Client(timeout=FREEZE_DEADLINE))
            assert subscriber.enter_context(client.stream("GET", f"{a}/v1/events")).status_code == 200
            freeze()

            def post_update():
                # The daemon may be stopping before the request reaches it (refused) or
                # while it waits: either answer is fine, the stop is what is tested.
                with contextlib.suppress(httpx.TransportError):
                    httpx.post(f"{a}/v1/tasks/t/progress", json={"increment": 1}, timeout=FREEZE_DEADLINE)
            update = threading.Thread(target=post_update)
            update.start()
            time.sleep(0.5)  # the update reaches the writer, which waits on the frozen server
            stopping_at = time.monotonic()
        print(f"stopped in {time.monotonic() - stopping_at:.1f} s")
        update.join(timeout=FREEZE_DEADLINE)
        log = log_of(tmp_path / "a")
        assert "server.stopped" in log
        assert "sent nothing for 7 s while the daemon stops" in log



def test_a_stop_waits_for_a_live_server_whose_statement_waits_for_a_lock(tmp_path):
    """A live server sends nothing while a statement waits for a lock, for up to the
    daemon's own lock_timeout (5 s): a stop then is no reason to give the connection up,
    which would answer 503 "nothing is known to be stored" for a batch the server goes on
    to commit."""
    with PostgresServer(tmp_path / "server") as server:
        server.create_database("faults")
        reply = {}
        with run_headwayd(tmp_path / "a", "--durability", "full", db=server.url("faults")) as a:
            assert httpx.post(f"{a}/v1/tasks", json={"id": "t", "name": "T", "total": 100}).status_code == 201
            # Another session holds the task's row for 3.5 s.
            holder = subprocess.Popen(
                [str(server.bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", server.url("faults"), "-c",
                 "BEGIN; SELECT 1 FROM tasks WHERE id = 't' FOR UPDATE; SELECT pg_sleep(3.5); COMMIT;"],
                stdout=subprocess.DEVNULL)
            time.sleep(0.5)

            def post_update():
                with httpx.Client(timeout=FREEZE_DEADLINE) as client:
                    reply["update"] = client.post(f"{a}/v1/tasks/t/progress", json={"increment": 1, "seq": 1})
            update = threading.Thread(target=post_update)
            update.start()
            time.sleep(0.5)  # the update waits for the row; the stop begins as the block ends
        update.join(timeout=FREEZE_DEADLINE)
        assert holder.wait(timeout=FREEZE_DEADLINE) == 0
        stored = server.psql("SELECT completed FROM tasks WHERE id = 't'", "faults").strip()
        assert (reply["update"].status_code, stored) == (200, "1"), reply["update"].text
        assert "while the daemon stops" not in log_of(tmp_path / "a")

@contextlib.contextmanager
def frozen_later(server):
    """A function that freezes `server` as `frozen` does, thawed when the block ends (after
    the blocks opened inside it: a daemon's stop there runs while the server is frozen)."""
    with contextlib.ExitStack() as stack:
        yield lambda: stack.enter_context(frozen(server))
