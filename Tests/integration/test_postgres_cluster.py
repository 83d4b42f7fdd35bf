"""Several headwayd sharing one PostgreSQL database (the private server of pgserver.py):
updates sent to any daemon reach the subscribers of every daemon in one order, under the
same ids; a subscriber resumes with Last-Event-ID on another daemon and misses nothing; a
retry with the same `seq` is applied once whichever daemon it reaches; the stall sweeper
moves to a survivor when its leader is killed; and two daemons behind a real nginx
(deploy/nginx/headway-upstream.conf), one of them killed mid-stream."""
import collections
import json
import random
import re
import signal
import subprocess
import threading
import time
import urllib.parse

import httpx
import pytest

from conftest import HEADWAYD, free_port, run_nginx, wait_for_port

# Bounds of the waits below: generous, they only stop a broken run from hanging.
WAIT_SECONDS = 20


class Daemon:
    """headwayd on a free loopback port with the PostgreSQL database `db` and its log in
    `directory`/headwayd.log (the flags of conftest's run_headwayd), which a test may kill."""

    def __init__(self, directory, db, *arguments):
        directory.mkdir(parents=True, exist_ok=True)
        self.log_path = directory / "headwayd.log"
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.address = f"127.0.0.1:{port}"
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [HEADWAYD, "--listen", self.address, "--db", db, "--durability", "normal",
                 "--sse-heartbeat", "1", *arguments],
                stderr=log)
        try:
            wait_for_port(port, self.process, "headwayd")
        except BaseException:
            self.kill()
            raise

    def log(self):
        return self.log_path.read_text()

    def kill(self):
        """SIGKILL: the daemon ends at once, its PostgreSQL sessions with it."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self):
        """SIGTERM, and a clean exit expected (unless the test killed it)."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=20) == 0, f"headwayd did not stop cleanly: {self.log()[-2000:]}"


@pytest.fixture
def start_daemon(tmp_path, postgres_url):
    """Starts daemons on the test's database, one after the other (`start_daemon(*flags)`
    returns a `Daemon`); stops them all at the end."""
    daemons = []

    def start(*arguments):
        daemon = Daemon(tmp_path / f"daemon-{len(daemons)}", postgres_url, *arguments)
        daemons.append(daemon)
        return daemon

    yield start
    for daemon in daemons:
        daemon.stop()


def database_rows(postgres, url, sql):
    """Rows of `sql` run by psql on the database of `url`, each a list of text columns."""
    name = urllib.parse.unquote(urllib.parse.urlparse(url).path.lstrip("/"))
    return [line.split("|") for line in postgres.psql(sql, database=name).splitlines() if line]


def register(client, base, task_id, **fields):
    reply = client.post(f"{base}/v1/tasks", json={"id": task_id, "name": f"Job {task_id}", **fields})
    assert reply.status_code == 201, reply.text
    return reply.json()


def wait_until(condition, what, seconds=WAIT_SECONDS):
    """Waits (bounded) until `condition()` holds, looking every 20 ms."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def join_all(threads, seconds):
    """Joins `threads`, all within `seconds` (bounded: a thread still running is left)."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


class Subscriber:
    """A dashboard following /v1/events over several connections: each one after the first
    resumes with the id of the last event received (Last-Event-ID). Events are read as the
    SSE standard says: an event cut off by a disconnection is not dispatched. Keeps, across
    all its connections, every event id in order, each task's `completed` values in order,
    the task and value each change number carried, and the stalls per task."""

    def __init__(self):
        self.last_id = None
        self.ids = []
        self.snapshots = 0
        self.completed = collections.defaultdict(list)
        self.stalled = collections.Counter()
        self.changes = {}
        self.connections = 0
        self.resumed_on = []

    def follow(self, client, base, until):
        """Reads one connection to `base` until `until(lines_read)` is true (checked after
        every line, keep-alive comments included: one a second) or the stream ends or
        breaks; returns how it ended ("stopped", "ended", or the error's name)."""
        headers = {"Last-Event-ID": self.last_id} if self.last_id else {}
        lines = 0
        fields = {}
        try:
            with client.stream("GET", f"{base}/v1/events", headers=headers) as response:
                assert response.status_code == 200, response.read()
                self.connections += 1
                if self.last_id:
                    self.resumed_on.append(base)
                for line in response.iter_lines():
                    lines += 1
                    if line == "":
                        if "data" in fields:
                            self._dispatch(fields)
                        fields = {}
                    elif not line.startswith(":"):
                        name, _, value = line.partition(":")
                        value = value.removeprefix(" ")
                        fields[name] = f"{fields[name]}\n{value}" if name == "data" and name in fields else value
                    if until(lines):
                        return "stopped"
            return "ended"
        except httpx.TransportError as error:
            return type(error).__name__

    def _dispatch(self, fields):
        name = fields.get("event", "message")
        data = json.loads(fields["data"])
        if "id" in fields:
            self.ids.append(int(fields["id"]))
            self.last_id = fields["id"]
        if name == "snapshot":
            self.snapshots += 1
            tasks = data["tasks"]
        else:
            tasks = [] if name == "task.deleted" else [data]
        if name == "task.stalled":
            self.stalled[data["id"]] += 1
        for task in tasks:
            self.completed[task["id"]].append(task["completed"])
        if "id" in fields and name not in ("snapshot", "task.deleted"):
            self.changes[int(fields["id"])] = (data["id"], data["completed"])

    def last_values(self):
        return {task: values[-1] for task, values in self.completed.items()}

    def check(self, final):
        """What the subscriber saw over its whole life: one snapshot (its first
        connection's), ids strictly increasing, no task going back, and every task's last
        value the final one."""
        assert self.snapshots == 1
        regressions = [(a, b) for a, b in zip(self.ids, self.ids[1:]) if b <= a]
        assert not regressions, f"event ids not strictly increasing: {regressions[:5]}"
        for task, values in self.completed.items():
            assert values == sorted(values), f"{task} went back: {values}"
        assert self.last_values() == final


def test_no_gap_no_duplicate_whichever_daemon(start_daemon, postgres, postgres_url):
    daemons = [start_daemon("--stall-timeout", "3600") for _ in range(2)]
    bases = [daemon.base for daemon in daemons]
    runner_count, steps_per_runner = 8, 200
    subscriber_count, connections_per_subscriber = 6, 6

    # Runners: each on its own keep-alive connection to one daemon (half on each). Every
    # tenth step registers a new task of its own; the others send an increment with the
    # task's next seq to one of its three newest tasks, so older tasks stop changing early
    # and a change a subscriber missed would stay visible as a wrong last value. Every
    # reply is checked; each task's acknowledged values are kept in order.
    acknowledged = {}
    values = collections.defaultdict(lambda: [0])
    problems = []
    runners_done = threading.Event()

    def run(runner):
        rng, seq, tasks = random.Random(1000 + runner), collections.Counter(), []
        try:
            with httpx.Client(base_url=bases[runner % 2], timeout=10) as client:
                for step in range(steps_per_runner):
                    if step % 10 == 0:
                        tasks.append(f"r{runner}-{step // 10}")
                        register(client, "", tasks[-1])
                        acknowledged[tasks[-1]] = 0
                        continue
                    task, increment = rng.choice(tasks[-3:]), rng.randint(1, 5)
                    seq[task] += 1
                    reply = client.post(f"/v1/tasks/{task}/progress", json={"increment": increment, "seq": seq[task]})
                    if (reply.status_code != 200 or "headway-unchanged" in reply.headers
                            or reply.json()["completed"] != acknowledged[task] + increment):
                        problems.append(f"{task} seq {seq[task]}: {reply.status_code} {reply.text}")
                        return
                    acknowledged[task] += increment
                    values[task].append(acknowledged[task])
        except Exception as error:  # noqa: BLE001 (reported by the test's thread)
            problems.append(f"runner {runner}: {error!r}")

    # Subscribers: each reads a random number of lines (seeded), drops the connection
    # (often in the middle of an event) and resumes on the other daemon, several times; its
    # last connection reads until it has seen every task's final value.
    subscribers = [Subscriber() for _ in range(subscriber_count)]
    final = {}
    final_known, give_up = threading.Event(), threading.Event()

    def subscribe(index):
        subscriber, rng = subscribers[index], random.Random(2000 + index)
        try:
            with httpx.Client(timeout=httpx.Timeout(10.0, read=10.0)) as client:
                for connection in range(connections_per_subscriber):
                    base = bases[(index + connection) % 2]
                    if connection == connections_per_subscriber - 1:
                        def until(lines):
                            return give_up.is_set() or (final_known.is_set() and subscriber.last_values() == final)
                    else:
                        budget = rng.randint(8, 400)

                        def until(lines, budget=budget):
                            return lines >= budget or runners_done.is_set()
                    subscriber.follow(client, base, until)
        except Exception as error:  # noqa: BLE001
            problems.append(f"subscriber {index}: {error!r}")

    subscriber_threads = [threading.Thread(target=subscribe, args=(i,), daemon=True) for i in range(subscriber_count)]
    for thread in subscriber_threads:
        thread.start()
    wait_until(lambda: all(s.snapshots == 1 for s in subscribers) or problems, "the snapshots")
    started = time.monotonic()
    runner_threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(runner_count)]
    for thread in runner_threads:
        thread.start()
    join_all(runner_threads, 60)
    writing_seconds = time.monotonic() - started
    resumes_while_writing = sum(len(s.resumed_on) for s in subscribers)
    runners_done.set()
    assert not problems, problems[:5]

    with httpx.Client() as client:
        for daemon in daemons:
            for task in list(acknowledged):
                reply = client.get(f"{daemon.base}/v1/tasks/{task}")
                assert reply.status_code == 200
                final.setdefault(task, reply.json()["completed"])
                assert reply.json()["completed"] == final[task], f"{task} differs between daemons"
    final_known.set()
    join_all(subscriber_threads, WAIT_SECONDS)
    give_up.set()
    join_all(subscriber_threads, 5)
    assert not problems, problems[:5]

    # Every acknowledged increment counted, in the API and in the database itself.
    assert len(acknowledged) == runner_count * steps_per_runner // 10
    assert final == acknowledged
    rows = database_rows(postgres, postgres_url, "SELECT id, completed FROM tasks ORDER BY id")
    assert {task: int(completed) for task, completed in rows} == final
    changes = {}
    for subscriber in subscribers:
        assert subscriber.connections == connections_per_subscriber
        subscriber.check(final)
        # Only values a runner was told of, and one change per id for every subscriber.
        for task, seen in subscriber.completed.items():
            assert set(seen) <= set(values[task]), task
        for change, task_and_value in subscriber.changes.items():
            assert changes.setdefault(change, task_and_value) == task_and_value, f"change {change} differs"
    updates = sum(len(acknowledged_values) - 1 for acknowledged_values in values.values())
    print(f"\n{len(acknowledged)} tasks, {updates} updates in {writing_seconds:.2f} s on two daemons; "
          f"{resumes_while_writing} resumes on the other daemon while writing, "
          f"{sum(len(s.ids) for s in subscribers)} events received by {subscriber_count} subscribers")


def test_retries_with_seq_are_idempotent_across_daemons(start_daemon, postgres, postgres_url):
    a, b = start_daemon(), start_daemon()
    body = {"id": "import", "name": "Import invoices", "total": 1000}
    with httpx.Client() as client:
        made = client.post(f"{a.base}/v1/tasks", json=body)
        assert made.status_code == 201, made.text
        again = client.post(f"{b.base}/v1/tasks", json=body)
        assert again.status_code == 200, again.text
        assert again.json()["created_at"] == made.json()["created_at"]
        conflicting = client.post(f"{b.base}/v1/tasks", json={**body, "total": 5})
        assert conflicting.status_code == 409

        def progress(daemon, seq, increment):
            return client.post(f"{daemon.base}/v1/tasks/import/progress", json={"increment": increment, "seq": seq})

        # Each daemon has the task in its cache now; each update goes to one, its retry
        # to the other, which must see the first one's write.
        for seq, (first, retry) in enumerate([(b, a), (a, b), (b, a), (a, b)], start=1):
            applied = progress(first, seq, 7)
            assert applied.status_code == 200 and "headway-unchanged" not in applied.headers
            assert applied.json()["completed"] == 7 * seq
            repeated = progress(retry, seq, 7)
            assert repeated.status_code == 200
            assert repeated.headers.get("headway-unchanged") == "true"
            assert repeated.json()["completed"] == 7 * seq
        # An older seq, even with another increment, is acknowledged and not applied.
        late = progress(b, 2, 100)
        assert late.status_code == 200 and late.headers.get("headway-unchanged") == "true"
        for daemon in (a, b):
            task = client.get(f"{daemon.base}/v1/tasks/import").json()
            assert (task["completed"], task["seq"]) == (28, 4)
    rows = database_rows(postgres, postgres_url, "SELECT completed, last_seq FROM tasks WHERE id = 'import'")
    assert rows == [["28", "4"]]


def test_leadership_moves_when_the_leader_dies(start_daemon, postgres, postgres_url):
    a, b = start_daemon("--stall-timeout", "1"), start_daemon("--stall-timeout", "1")
    wait_until(lambda: "leadership.acquired" in a.log() + b.log(), "a leader")
    leaders = [daemon for daemon in (a, b) if "leadership.acquired" in daemon.log()]
    assert len(leaders) == 1
    leader, survivor = leaders[0], (b if leaders[0] is a else a)

    # A dashboard on the survivor counts the stalls.
    subscriber, stop = Subscriber(), threading.Event()

    def subscribe():
        with httpx.Client(timeout=httpx.Timeout(10.0, read=10.0)) as client:
            subscriber.follow(client, survivor.base, lambda lines: stop.is_set())

    reader = threading.Thread(target=subscribe, daemon=True)
    reader.start()
    wait_until(lambda: subscriber.snapshots == 1, "the snapshot")

    # Silent tasks (1 s stall deadlines) registered on both daemons, then the leader killed
    # at once; more registered right after the kill, which only the survivor can stall.
    with httpx.Client() as client:
        before = [f"before-{i}" for i in range(6)]
        for i, task in enumerate(before):
            register(client, (a, b)[i % 2].base, task)
        leader.kill()
        killed = time.monotonic()
        stalled_before_kill = sum(subscriber.stalled.values())
        after = [f"after-{i}" for i in range(3)]
        for task in after:
            register(client, survivor.base, task)
        wait_until(lambda: "leadership.acquired" in survivor.log(), "the survivor to lead")
        takeover = time.monotonic() - killed
        wait_until(lambda: set(subscriber.stalled) >= set(before + after), "every stall")
        # A last silent task: when its stall arrives, the sweeper has run several times
        # since the others stalled, and a second stall of one of them would have shown.
        register(client, survivor.base, "last")
        wait_until(lambda: "last" in subscriber.stalled, "the last stall")
        stop.set()
        reader.join(timeout=5)
        assert subscriber.stalled == {task: 1 for task in before + after + ["last"]}
        for task in before + after:
            reply = client.get(f"{survivor.base}/v1/tasks/{task}").json()
            assert reply["stalled"] is True and reply["stall_reason"] == "silent"
    rows = database_rows(postgres, postgres_url, "SELECT id, stalled FROM tasks")
    assert {task: int(stalled) for task, stalled in rows} == {task: 1 for task in before + after + ["last"]}
    assert subscriber.ids == sorted(set(subscriber.ids))
    print(f"\nsurvivor led {takeover:.2f} s after the kill; {stalled_before_kill} of 6 tasks had stalled before it")


def test_two_daemons_behind_nginx_one_killed_mid_stream(start_daemon, postgres, postgres_url, tmp_path):
    daemons = [start_daemon("--stall-timeout", "3600") for _ in range(2)]
    port = free_port()
    replacements = {"server 127.0.0.1:8080 ": f"server {daemons[0].address} ",
                    "server 127.0.0.1:8081 ": f"server {daemons[1].address} ",
                    "listen 80;": f"listen 127.0.0.1:{port};"}
    with run_nginx(tmp_path / "nginx", "headway-upstream.conf", replacements, port):
        base = f"http://127.0.0.1:{port}"
        tasks = ["photos", "videos", "music"]
        with httpx.Client() as client:
            for task in tasks:
                register(client, base, task)

        # The subscriber through nginx: it reconnects (through nginx) with Last-Event-ID
        # whenever its stream ends, until it has seen the final values.
        subscriber, final, problems = Subscriber(), {}, []
        final_known, give_up = threading.Event(), threading.Event()
        endings = []

        def subscribe():
            with httpx.Client(timeout=httpx.Timeout(10.0, read=10.0)) as client:
                for _ in range(20):
                    ending = subscriber.follow(client, base, lambda lines: give_up.is_set() or (
                        final_known.is_set() and subscriber.last_values() == final))
                    endings.append(ending)
                    if ending == "stopped":
                        return

        reader = threading.Thread(target=subscribe, daemon=True)
        reader.start()
        wait_until(lambda: subscriber.snapshots == 1, "the snapshot")
        gauges = []
        for daemon in daemons:
            metrics = httpx.get(f"{daemon.base}/metrics").text
            gauges.append(int(float(re.search(r"^headway_event_subscribers (\S+)$", metrics, re.M).group(1))))
        assert sorted(gauges) == [0, 1]
        streaming = daemons[gauges.index(1)]

        # Runners through nginx, one per task, each resending a failed update with the
        # same seq until it is acknowledged; the daemon serving the stream is killed while
        # they run, most likely with requests of theirs in flight.
        acknowledged, retries = collections.Counter(), collections.Counter()

        def run(task, seed):
            rng = random.Random(seed)
            with httpx.Client(base_url=base, timeout=10) as client:
                for seq in range(1, 151):
                    increment = rng.randint(1, 9)
                    for _ in range(100):
                        try:
                            reply = client.post(f"/v1/tasks/{task}/progress", json={"increment": increment, "seq": seq})
                        except httpx.TransportError as error:
                            retries[type(error).__name__] += 1
                            continue
                        if reply.status_code in (502, 503, 504):
                            retries[reply.status_code] += 1
                            time.sleep(0.05)
                            continue
                        if reply.status_code != 200:
                            problems.append(f"{task} seq {seq}: {reply.status_code} {reply.text}")
                            return
                        retries["acknowledged again"] += reply.headers.get("headway-unchanged") == "true"
                        break
                    else:
                        problems.append(f"{task} seq {seq} never acknowledged")
                        return
                    acknowledged[task] += increment

        runners = [threading.Thread(target=run, args=(task, seed), daemon=True) for seed, task in enumerate(tasks)]
        for runner in runners:
            runner.start()
        wait_until(lambda: sum(acknowledged.values()) >= 5 * 150 or problems, "updates before the kill")
        streaming.kill()
        join_all(runners, 60)
        assert not problems, problems
        with httpx.Client() as client:
            for task in tasks:
                final[task] = client.get(f"{base}/v1/tasks/{task}").json()["completed"]
        final_known.set()
        reader.join(timeout=WAIT_SECONDS)
        give_up.set()
        reader.join(timeout=5)

    assert final == dict(acknowledged)
    rows = database_rows(postgres, postgres_url, "SELECT id, completed FROM tasks")
    assert {task: int(completed) for task, completed in rows} == final
    assert endings[-1] == "stopped" and len(endings) >= 2, endings
    subscriber.check(final)
    print(f"\nrunner retries {dict(retries)}; subscriber's connections ended {endings}")
