"""Crash rounds: headwayd killed with SIGKILL at random moments under load, restarted on
the same database, and checked against exactly what it acknowledged.

One round: the daemon runs on a free loopback port; runner threads (8 by default), each
owning its tasks, send updates over keep-alive connections — runners of one kind send
`increment` updates, the others absolute `completed` values, all with an increasing
`seq`; now and then a heartbeat (with a `seq`), a finish, and registrations of new tasks
(roots, and children of a parent per runner, so that an update also changes the parent's
roll-up in the same transaction). Each runner keeps, per task, what was acknowledged (a
2xx reply) and, when its connection breaks, the one request it had in flight. A
subscriber follows the event stream. After a random delay (from a seeded RNG; mostly
0.05–1 s, sometimes at once, sometimes late enough for the stall sweeper's own writes)
the daemon gets SIGKILL — sometimes SIGTERM first and SIGKILL during the clean stop,
sometimes also a kill while it starts.

Then:
- the files as the kill left them (database and `-wal`, copied, so the daemon still does
  its own recovery) are opened by the `sqlite3` shell, which replays the WAL: `PRAGMA
  integrity_check` must say `ok`, and the rows must keep the daemon's own invariants
  (counts kept by triggers, parents' roll-up, history bookkeeping);
- for every task: acknowledged registrations exist; the stored `completed`, `seq`,
  `label` and `state` are those of the last acknowledged change, or of the one request in
  flight applied on top of it — nothing else; no task exists that was neither
  acknowledged nor in flight;
- no event the subscriber received shows a change the file lacks;
- the daemon restarts on the same database; what it serves must equal the raw rows, and
  pass the same checks; each parent's fraction must match its children;
- each request in flight is sent again with its same `seq`: if it had been applied the
  reply is `Headway-Unchanged` and nothing changes; if not, it is applied now.

The model then continues into the next round on the same database. At the end the daemon
is stopped with SIGTERM (exit status 0) and the database checked once more.
`creation_kills` kills the daemon while it creates and migrates a new database.

Used by Tests/integration/test_crash.py (a few rounds) and bench/crash-proof.py (many).
"""
import dataclasses
import http.client
import json
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SQLITE3 = shutil.which("sqlite3") or "/usr/bin/sqlite3"
JSON_HEADERS = {"Content-Type": "application/json"}
# Child tasks and some roots are quantified. A task about to pass its total is no longer
# updated; this one is above what a task reaches in a long run, and small enough that one
# unit of a child moves its parent's roll-up far more than rounding does.
TOTAL = 100_000
# How far two sums of floating-point shares may differ (the parent's roll-up is kept by
# adding deltas, so it drifts by rounding: about 1e-16 per change).
ROLL_UP_TOLERANCE = 1e-9


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """headwayd on one database, started and killed again and again, each time on a free
    loopback port; its log (warnings and errors) is appended to `directory`/headwayd.log."""

    def __init__(self, binary, directory, durability, stall_timeout=1):
        self.binary = str(binary)
        self.directory = pathlib.Path(directory)
        self.database = self.directory / "headway.db"
        self.durability = durability
        self.stall_timeout = stall_timeout
        self.process = None
        self.port = None

    def spawn(self):
        """Starts the process without waiting for it to listen."""
        self.port = free_port()
        with open(self.directory / "headwayd.log", "a") as log:
            log.write(f"--- start on port {self.port}\n")
            log.flush()
            self.process = subprocess.Popen(
                [self.binary, "--listen", f"127.0.0.1:{self.port}", "--db", str(self.database),
                 "--durability", self.durability, "--stall-timeout", str(self.stall_timeout),
                 "--log-level", "warn"],
                stdout=subprocess.DEVNULL, stderr=log)

    def start(self, seconds=30):
        """Starts the daemon and waits until it is ready (`/readyz` 200)."""
        self.spawn()
        deadline = time.monotonic() + seconds
        attempts = 1
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                # Another program may have taken the free port meanwhile: another one.
                if "cannot listen on" in self.log_tail(1) and attempts < 5:
                    attempts += 1
                    self.spawn()
                    continue
                raise RuntimeError(f"headwayd exited with {self.process.returncode}: {self.log_tail()}")
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                connection.request("GET", "/readyz")
                ready = connection.getresponse()
                ready.read()
                connection.close()
                if ready.status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError(f"headwayd not ready on port {self.port}: {self.log_tail()}")

    def kill(self):
        """SIGKILL, and reap the process."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def terminate_then_kill(self, delay):
        """SIGTERM (the clean stop begins), then SIGKILL `delay` seconds later unless it has
        exited by then; returns whether the kill came before the stop ended."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=delay)
            return False
        except subprocess.TimeoutExpired:
            self.kill()
            return True

    def stop(self):
        """SIGTERM; returns the exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)

    def log_tail(self, lines=20):
        try:
            return "\n".join((self.directory / "headwayd.log").read_text().splitlines()[-lines:])
        except OSError:
            return ""


@dataclasses.dataclass
class TaskModel:
    """One task as its runner knows it: its definition and the state of the last
    acknowledged change."""
    id: str
    parent_id: str | None
    weight: float
    total: int | None
    registered: bool = False
    completed: int = 0
    seq: int | None = None
    label: str | None = None
    state_name: str = "running"
    retired: bool = False
    # The next seq this task's runner uses.
    next_seq: int = 1

    def registration(self):
        body = {"id": self.id, "name": f"Crash round task {self.id}", "unit": "items"}
        if self.total is not None:
            body["total"] = self.total
        if self.parent_id is not None:
            body["parent_id"] = self.parent_id
            body["weight"] = self.weight
        return body

    @property
    def state(self):
        """What an update changes: (completed, seq, label, state)."""
        return (self.completed, self.seq, self.label, self.state_name)


@dataclasses.dataclass
class Operation:
    """One request of a runner, and the task's state once it is applied."""
    kind: str  # "register", "progress", "heartbeat" or "finish"
    task: TaskModel
    path: str
    body: dict
    after: tuple  # (completed, seq, label, state) once applied

    def describe(self):
        return f"{self.kind} {self.task.id} {json.dumps(self.body, sort_keys=True)}"


class Statistics:
    """What a series of rounds did."""

    FIELDS = ["rounds", "updates_acknowledged", "finishes_acknowledged", "registrations_acknowledged", "refused",
              "in_flight_applied", "in_flight_not_applied", "registrations_in_flight_applied",
              "registrations_in_flight_not_applied", "startup_kills", "stops_begun", "kills_during_stop",
              "reconnects", "stalled_seen", "events_seen", "subscribers_cut_off"]

    def __init__(self):
        for field in self.FIELDS:
            setattr(self, field, 0)
        self.failures = []
        self.seconds = 0.0
        self.wal_frames = []  # the frames (pages) the WAL held at each kill
        self.refusals = {}  # "status code" -> count

    def as_dict(self):
        frames = sorted(self.wal_frames) or [0]
        return {**{field: getattr(self, field) for field in self.FIELDS},
                "wal_frames_at_kill_median": frames[len(frames) // 2], "wal_frames_at_kill_max": frames[-1],
                "refusals": dict(sorted(self.refusals.items())),
                "failures": len(self.failures), "seconds": round(self.seconds, 1)}


class Runner(threading.Thread):
    """Sends one request at a time over a keep-alive connection until the daemon is
    killed; `kind` is "increment" or "absolute"."""

    MAXIMUM_ACTIVE = 6

    def __init__(self, index, kind, port, tasks, rng, killed, failures, round_number):
        super().__init__(daemon=True, name=f"runner-{index}")
        self.index = index
        self.kind = kind
        self.port = port
        self.tasks = tasks  # every task of this runner, in registration order
        self.rng = rng
        self.killed = killed
        self.failures = failures
        self.round_number = round_number
        self.in_flight = None
        self.acknowledged_updates = 0
        self.acknowledged_finishes = 0
        self.acknowledged_registrations = 0
        self.refused = 0
        self.refusals = {}  # "status code" -> count
        self.reconnects = 0
        self.connection = None

    @property
    def parent(self):
        return self.tasks[0]

    def fail(self, text):
        self.failures.append(f"round {self.round_number}, runner {self.index}: {text}")

    def new_task(self):
        number = len(self.tasks)
        if number == 0:
            task = TaskModel(id=f"r{self.index}-parent", parent_id=None, weight=1, total=None)
        else:
            child = self.rng.random() < 0.5
            task = TaskModel(id=f"r{self.index}-t{number}",
                             parent_id=self.parent.id if child else None,
                             weight=self.rng.choice([0.5, 1, 2]) if child else 1,
                             total=TOTAL if child or self.rng.random() < 0.5 else None)
        self.tasks.append(task)
        return task

    def next_operation(self):
        unregistered = [task for task in self.tasks if not task.registered]
        if unregistered:
            # A registration refused earlier (or the first one): try again.
            task = unregistered[0]
            return Operation("register", task, "/v1/tasks", task.registration(), (0, None, None, "running"))
        active = [task for task in self.tasks[1:] if not task.retired]
        if len(active) < 2 or self.rng.random() < 0.01:
            if len(active) >= self.MAXIMUM_ACTIVE:
                self.rng.choice(active).retired = True
            task = self.new_task()
            return Operation("register", task, "/v1/tasks", task.registration(), (0, None, None, "running"))
        task = self.rng.choice(active)
        if self.rng.random() < 0.01:
            # Finished: no more updates; a quantified task that succeeds is complete.
            task.retired = True
            outcome = self.rng.choice(["succeeded", "succeeded", "failed"])
            completed = task.total if outcome == "succeeded" and task.total is not None else task.completed
            return Operation("finish", task, f"/v1/tasks/{task.id}/finish",
                             {"outcome": outcome, **({"message": "crash round"} if outcome == "failed" else {})},
                             (completed, task.seq, task.label, outcome))
        seq = task.next_seq
        label = f"{self.kind} seq {seq}"
        if self.rng.random() < 0.1:
            return Operation("heartbeat", task, f"/v1/tasks/{task.id}/heartbeat", {"label": label, "seq": seq},
                             (task.completed, seq, label, "running"))
        step = self.rng.randint(1, 5)
        value = task.completed + step
        if task.total is not None and value > task.total:
            task.retired = True
            return self.next_operation()
        body = {"increment": step} if self.kind == "increment" else {"completed": value}
        body.update(seq=seq, label=label)
        return Operation("progress", task, f"/v1/tasks/{task.id}/progress", body, (value, seq, label, "running"))

    def send(self, operation):
        if self.connection is None:
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.connection.request("POST", operation.path, json.dumps(operation.body), JSON_HEADERS)
        response = self.connection.getresponse()
        return response.status, response.getheader("Headway-Unchanged") == "true", response.read()

    def run(self):
        try:
            while not self.killed.is_set():
                operation = self.next_operation()
                if operation.kind in ("progress", "heartbeat"):
                    operation.task.next_seq += 1
                if not self.attempt(operation):
                    return
        except Exception as error:  # a bug of this harness must fail the round, not hang it
            self.fail(f"runner stopped by {error!r}")
        finally:
            if self.connection is not None:
                self.connection.close()

    def attempt(self, operation):
        """Sends `operation` until it is answered; returns False once the daemon is gone
        (the operation is then in flight)."""
        retried = False
        while True:
            try:
                status, unchanged, body = self.send(operation)
                break
            except (OSError, http.client.HTTPException):
                self.connection.close()
                self.connection = None
                if self.killed.is_set():
                    self.in_flight = operation
                    return False
                # The connection broke while the daemon runs: not expected, but not a loss;
                # the same request again, with its same seq, is safe.
                self.reconnects += 1
                retried = True
                if self.reconnects > 20:
                    self.fail("more than 20 connections broke while the daemon was running")
                    return False
        self.answered(operation, status, unchanged, body, retried)
        return True

    def answered(self, operation, status, unchanged, body, retried):
        task = operation.task
        if not 200 <= status < 300:
            # Refused: nothing changed. Over capacity (503) may happen under load or while the
            # daemon stops; anything else means this model and the daemon disagree.
            self.refused += 1
            try:
                code = json.loads(body).get("code")
            except ValueError:
                code = None
            key = f"{status} {code}" + (" (stopping)" if self.killed.is_set() else "")
            self.refusals[key] = self.refusals.get(key, 0) + 1
            if status != 503:
                self.fail(f"{operation.describe()} refused with {status}: {body[:300]!r}")
                task.retired = True
            return
        reply = json.loads(body)
        if operation.kind == "register":
            if status != 201 and not retried:
                self.fail(f"{operation.describe()}: {status} for a new task")
            task.registered = True
            self.acknowledged_registrations += 1
            return
        if unchanged and not retried:
            self.fail(f"{operation.describe()}: acknowledged as a repeat, but its seq is new")
        stored = (reply["completed"], reply["seq"], reply["label"], reply["state"])
        if stored != operation.after:
            self.fail(f"{operation.describe()}: the reply shows {stored}, expected {operation.after}")
        task.completed, task.seq, task.label, task.state_name = operation.after
        self.acknowledged_updates += 1
        if operation.kind == "finish":
            self.acknowledged_finishes += 1


class Subscriber(threading.Thread):
    """Follows the event stream (`GET /v1/events`) until the daemon dies, keeping the last
    event seen of each task: no event may show a change the database then lacks."""

    def __init__(self, port, killed):
        super().__init__(daemon=True, name="subscriber")
        self.port = port
        self.killed = killed
        self.cut_off = False  # disconnected by the daemon before the kill (a slow reader)
        self.ready = threading.Event()
        self.last = {}  # task id -> (change number, or None for the snapshot's, task)
        self.highest = None  # the highest event id seen
        self.events = 0
        self.error = None

    def run(self):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            connection.request("GET", "/v1/events", headers={"Accept": "text/event-stream"})
            response = connection.getresponse()
            if response.status != 200:
                self.error = f"GET /v1/events: {response.status}"
                return
            self.ready.set()
            event_id, kind, data = None, None, []
            while True:
                line = response.readline()
                if not line:
                    return
                line = line.rstrip(b"\n").decode()
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    data.append(line[6:])
                elif line == "" and kind is not None:
                    self.take(event_id, kind, json.loads("\n".join(data)))
                    event_id, kind, data = None, None, []
        except (OSError, http.client.HTTPException, ValueError):
            return  # the kill
        finally:
            self.cut_off = not self.killed.is_set()
            self.ready.set()

    def take(self, event_id, kind, data):
        self.events += 1
        if event_id is not None:
            self.highest = event_id if self.highest is None else max(self.highest, event_id)
        if kind == "snapshot":
            for task in data["tasks"]:
                self.last[task["id"]] = (None, task)
        elif kind.startswith("task.") and "id" in data:
            self.last[data["id"]] = (event_id, data)

    def failures(self, rows):
        """What the stream showed that the database (`rows`, from the raw file) lacks."""
        failures = []
        newest = max((row["change_seq"] for row in rows.values()), default=0)
        if self.highest is not None and self.highest > newest:
            failures.append(f"event stream: id {self.highest} was sent, the newest change stored is {newest}")
        for id, (number, seen) in self.last.items():
            row = rows.get(id)
            if row is None:
                failures.append(f"event stream: task {id} was shown, it is not stored")
                continue
            shown = (seen["completed"], seen["seq"], seen["label"], seen["state"])
            stored = (row["completed"], row["seq"], row["label"], row["state"])
            if number is None:
                # In the snapshot: no change number of its own, but it cannot go back.
                if row["completed"] < seen["completed"] or (row["seq"] or 0) < (seen["seq"] or 0):
                    failures.append(f"event stream: the snapshot showed {id} as {shown}, stored {stored}")
            elif row["change_seq"] < number:
                failures.append(f"event stream: change {number} of {id} was sent ({shown}), "
                                f"the task's newest stored change is {row['change_seq']} ({stored})")
            elif row["change_seq"] == number and shown != stored:
                failures.append(f"event stream: change {number} of {id} was sent as {shown}, stored as {stored}")
        return failures


def sqlite3(database, sql, *options):
    """Runs `sql` in the sqlite3 shell on `database`; returns its standard output."""
    result = subprocess.run([SQLITE3, *options, str(database), sql], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"sqlite3 {sql!r} failed ({result.returncode}): {result.stderr}")
    return result.stdout


RAW_ROWS = """
SELECT id, completed, last_seq AS seq, label, total, parent_id, weight, state, stalled, child_count, change_seq,
       children_weight, children_done, history_points, children_pending, children_running, children_stalled,
       children_succeeded, children_failed, children_canceled, failing_children, stalling_children,
       (SELECT count(*) FROM history h WHERE h.task_id = t.id) AS history_rows,
       (SELECT max(completed) FROM history h WHERE h.task_id = t.id) AS history_max
FROM tasks t
"""

# Rows of `task_counts` (kept by triggers) that disagree with a count of the tasks.
COUNTS_DISAGREE = """
SELECT count(*) FROM (
  SELECT state, stalled, is_root, total IS NOT NULL OR children_weight > 0 AS quantified,
         coalesce(stall_reason, '') AS stall_reason, count(*) AS n
  FROM tasks GROUP BY 1, 2, 3, 4, 5
) AS counted FULL OUTER JOIN (SELECT * FROM task_counts WHERE n <> 0) AS kept
  USING (state, stalled, is_root, quantified, stall_reason)
WHERE counted.n IS NOT kept.n
"""


def copy_as_left(database, scratch):
    """Copies `database` and its `-wal` (or rollback journal) as the kill left them, so
    that the daemon's own files stay untouched for its own recovery; returns the copy."""
    scratch.mkdir(parents=True, exist_ok=True)
    copy = scratch / "copy.db"
    for suffix in ["", "-wal", "-shm", "-journal"]:
        (scratch / f"copy.db{suffix}").unlink(missing_ok=True)
    shutil.copyfile(database, copy)
    # The WAL, or the rollback journal of the first start (it migrates before it turns WAL on).
    for suffix in ["-wal", "-journal"]:
        if pathlib.Path(f"{database}{suffix}").exists():
            shutil.copyfile(f"{database}{suffix}", f"{copy}{suffix}")
    return copy


def raw_check(database, scratch, wal_frames=None):
    """Opens a copy of `database` as the kill left it with the sqlite3 shell, which
    replays the WAL: integrity, the daemon's invariants. Returns (failures, rows by id);
    appends to `wal_frames` how many frames the WAL held (those SQLite found valid)."""
    copy = copy_as_left(database, scratch)
    failures = []
    try:
        # Then a checkpoint, which says how many frames of the WAL it read.
        *integrity, checkpoint = sqlite3(copy, "PRAGMA integrity_check; PRAGMA wal_checkpoint").splitlines()
        integrity = "\n".join(integrity).strip()
        if wal_frames is not None:
            wal_frames.append(max(0, int(checkpoint.split("|")[1])))
        if integrity != "ok":
            return [f"PRAGMA integrity_check: {integrity[:2000]}"], {}
        if (disagree := sqlite3(copy, COUNTS_DISAGREE).strip()) != "0":
            failures.append(f"task_counts disagrees with the tasks in {disagree} rows")
        output = sqlite3(copy, RAW_ROWS, "-json").strip()
    except RuntimeError as error:
        return [str(error)], {}
    rows = {row["id"]: row for row in (json.loads(output) if output else [])}
    failures += invariant_failures(rows)
    return failures, rows


def invariant_failures(rows):
    """The daemon's own bookkeeping, which each transaction keeps with the change."""
    failures = []
    children = {}
    for row in rows.values():
        if row["parent_id"] is not None:
            children.setdefault(row["parent_id"], []).append(row)
        if row["history_points"] != row["history_rows"]:
            failures.append(f"{row['id']}: history_points {row['history_points']} but {row['history_rows']} rows")
        if row["child_count"] == 0 and row["history_max"] is not None and row["history_max"] > row["completed"]:
            failures.append(f"{row['id']}: a history sample of {row['history_max']} above completed {row['completed']}")
    for row in rows.values():
        mine = children.get(row["id"], [])
        if row["child_count"] != len(mine):
            failures.append(f"{row['id']}: child_count {row['child_count']} but {len(mine)} children")
        for state in ("pending", "running", "succeeded", "failed", "canceled"):
            counted = sum(1 for child in mine if child["state"] == state)
            if row[f"children_{state}"] != counted:
                failures.append(f"{row['id']}: children_{state} {row[f'children_{state}']} but {counted} children")
        stalled = sum(1 for child in mine if child["state"] == "running" and child["stalled"])
        if row["children_stalled"] != stalled:
            failures.append(f"{row['id']}: children_stalled {row['children_stalled']} but {stalled} children")
        failing = sum(1 for child in mine if child["state"] == "failed" or child["failing_children"] > 0)
        stalling = sum(1 for child in mine
                       if child["state"] == "running" and child["stalled"] or child["stalling_children"] > 0)
        if (row["failing_children"], row["stalling_children"]) != (failing, stalling):
            failures.append(f"{row['id']}: failing/stalling children {row['failing_children']}/"
                            f"{row['stalling_children']} but {failing}/{stalling}")
        weight = sum(child["weight"] for child in mine)
        done = sum(child["weight"] * share(child) for child in mine)
        if abs(row["children_weight"] - weight) > ROLL_UP_TOLERANCE:
            failures.append(f"{row['id']}: children_weight {row['children_weight']} but the children weigh {weight}")
        if abs(row["children_done"] - done) > ROLL_UP_TOLERANCE:
            failures.append(f"{row['id']}: children_done {row['children_done']} but the children have done {done}")
    return failures


def share(row):
    """A child's share of its parent as the daemon counts it (Task.shareOfParent): 1 once
    succeeded, else its fraction (a failed or canceled child keeps the one it finished
    with); the children here have no children of their own."""
    if row["state"] == "succeeded":
        return 1
    if not row["total"]:
        return 0
    return row["completed"] / row["total"]


class Client:
    """One keep-alive connection of the checker."""

    def __init__(self, port):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def request(self, method, path, body=None):
        self.connection.request(method, path, None if body is None else json.dumps(body), JSON_HEADERS)
        response = self.connection.getresponse()
        data = response.read()
        return response.status, response.getheader("Headway-Unchanged") == "true", data

    def all_tasks(self):
        """Every task, through the paged listing; also returns the listing's total_size."""
        tasks, token, total_size = {}, None, None
        while True:
            path = "/v1/tasks?page_size=500" + (f"&page_token={token}" if token else "")
            status, _, data = self.request("GET", path)
            if status != 200:
                raise RuntimeError(f"GET {path}: {status} {data[:300]!r}")
            page = json.loads(data)
            total_size = page["total_size"] if total_size is None else total_size
            tasks.update((task["id"], task) for task in page["tasks"])
            token = page["next_page_token"]
            if not token:
                return tasks, total_size

    def close(self):
        self.connection.close()


def classify(model, stored, in_flight):
    """Whether the stored state of `model`'s task is its acknowledged state ("acked"), the
    in-flight operation applied on top ("applied"), or neither (None)."""
    state = (stored["completed"], stored["seq"], stored["label"], stored["state"])
    if state == model.state:
        # An update in flight always changes the seq or the state, so it cannot look unapplied.
        return "acked"
    if in_flight is not None and in_flight.kind != "register" and state == in_flight.after:
        return "applied"
    return None


def compare(where, tasks, stored, in_flight):
    """Checks the tasks as `stored` (rows from the raw file or tasks from the API) against
    the model; returns (failures, outcome per in-flight operation: True when applied)."""
    failures, outcomes = [], {}
    flying = {operation.task.id: operation for operation in in_flight}
    parents = {task.parent_id for task in tasks if task.parent_id is not None}
    for task in tasks:
        operation = flying.get(task.id)
        row = stored.get(task.id)
        if row is None:
            if task.registered:
                failures.append(f"{where}: task {task.id} was registered (acknowledged) but is missing")
            elif operation is not None and operation.kind == "register":
                outcomes[task.id] = False
            continue
        if not task.registered and operation is None:
            failures.append(f"{where}: task {task.id} exists, its registration neither acknowledged nor in flight")
            continue
        if operation is not None and operation.kind == "register":
            outcomes[task.id] = True
        if (row["parent_id"], row["total"]) != (task.parent_id, task.total) or \
                (task.parent_id is not None and row["weight"] != task.weight):
            failures.append(f"{where}: task {task.id} is defined as {row['parent_id'], row['total'], row['weight']}")
        if task.id in parents:
            continue  # a parent: its roll-up is checked apart, it gets no updates of its own
        verdict = classify(task, row, operation)
        if verdict is None:
            failures.append(
                f"{where}: task {task.id} stores (completed, seq, label, state) = "
                f"{(row['completed'], row['seq'], row['label'], row['state'])}; acknowledged {task.state}"
                + (f", in flight {operation.describe()} -> {operation.after}" if operation else ", nothing in flight"))
        elif operation is not None and operation.kind != "register":
            outcomes[task.id] = verdict == "applied"
    known = {task.id for task in tasks}
    for extra in sorted(set(stored) - known):
        failures.append(f"{where}: task {extra} exists but no runner registered it")
    return failures, outcomes


def parent_failures(tasks):
    """Each parent as the daemon serves it against its children: its fraction (without a
    total of its own, the mean where a succeeded child counts 1, any other its own fraction,
    0 if indeterminate; with one, its completed units and its unfinished children's
    fractions over it; a parent with a failed child stays below 1), its `children` counts
    and its `attention`."""
    failures, children = [], {}
    for task in tasks.values():
        if task["parent_id"] is not None:
            children.setdefault(task["parent_id"], []).append(task)
    for parent_id, mine in children.items():
        parent = tasks[parent_id]
        weight = sum(child["weight"] for child in mine)
        done = sum(child["weight"] * (1 if child["state"] == "succeeded" else child["fraction"] or 0) for child in mine)
        failing = any(child["state"] == "failed" or child["attention"] == "failed" for child in mine)
        expected = done / weight
        if parent["total"]:
            # A parent with its own total counts its children as units of it.
            unfinished = sum(child["weight"] * (child["fraction"] or 0) for child in mine
                             if child["state"] in ("pending", "running"))
            expected = min(1, (parent["completed"] + unfinished) / parent["total"])
        if failing:
            expected = min(expected, 0.999999)
        elif parent["state"] == "succeeded":
            expected = 1
        if parent["state"] in ("pending", "running") or parent["state"] == "succeeded" and not failing:
            if parent["fraction"] is None or abs(parent["fraction"] - expected) > ROLL_UP_TOLERANCE:
                failures.append(f"API: parent {parent_id} has fraction {parent['fraction']}, its children {expected}")
        counts = {state: sum(1 for child in mine if child["state"] == state)
                  for state in ("pending", "running", "succeeded", "failed", "canceled")}
        counts["stalled"] = sum(1 for child in mine if child["state"] == "running" and child["stalled"])
        counts["total"] = len(mine)
        if parent["children"] != counts:
            failures.append(f"API: parent {parent_id} has children {parent['children']}, its children {counts}")
        stalling = any(child["state"] == "running" and child["stalled"] or child["attention"] == "stalled"
                       for child in mine)
        attention = "failed" if failing else "stalled" if stalling else None
        if parent["attention"] != attention:
            failures.append(f"API: parent {parent_id} has attention {parent['attention']}, its children {attention}")
    return failures


class CrashRounds:
    """Rounds against one database in one durability mode. `seed` decides the kill delays
    and every runner's choices; the threads' interleaving (and so the exact moment in the
    work a kill lands on) is the machine's."""

    def __init__(self, binary, directory, durability, seed, runners=8, minimum_delay=0.05, maximum_delay=1.0,
                 startup_kill_chance=0.05, stop_kill_chance=0.1, late_kill_chance=0.1, log=None, after_kill=None):
        self.daemon = Daemon(binary, directory, durability)
        self.directory = pathlib.Path(directory)
        self.durability = durability
        self.seed = seed
        self.rng = random.Random(f"{seed}-{durability}")
        self.runner_count = runners
        self.minimum_delay = minimum_delay
        self.maximum_delay = maximum_delay
        self.startup_kill_chance = startup_kill_chance
        self.stop_kill_chance = stop_kill_chance
        self.late_kill_chance = late_kill_chance
        self.tasks = [[] for _ in range(runners)]  # per runner, the parent first
        self.statistics = Statistics()
        self.log = log or (lambda text: None)
        # Called with the database path after each kill, before the checks (the tests use
        # it to damage the database on purpose and see the checks notice).
        self.after_kill = after_kill
        self.round_number = 0

    def all_tasks(self):
        return [task for tasks in self.tasks for task in tasks]

    def run(self, rounds, max_seconds=None):
        """Runs `rounds` rounds (fewer if `max_seconds` pass first, or once one fails),
        then stops the daemon cleanly and checks once more."""
        start = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            for _ in range(rounds):
                self.round()
                if self.statistics.failures or (max_seconds and time.monotonic() - start > max_seconds):
                    break
            if not self.statistics.failures:
                self.finish()
        finally:
            if self.daemon.process is not None and self.daemon.process.poll() is None:
                self.daemon.kill()
            self.statistics.seconds += time.monotonic() - start
        return self.statistics

    def fail(self, text):
        self.statistics.failures.append(f"[{self.durability}, seed {self.seed}] round {self.round_number}: {text}")

    def round(self):
        self.round_number += 1
        statistics = self.statistics
        running = self.daemon.process is not None and self.daemon.process.poll() is None
        if self.rng.random() < self.startup_kill_chance:
            # Killed while it opens the database (and, the first time, migrates it).
            if running:
                self.daemon.kill()
            self.daemon.spawn()
            time.sleep(self.rng.uniform(0, 0.05))
            self.daemon.kill()
            statistics.startup_kills += 1
            running = False
        if not running:
            self.daemon.start()
        killed = threading.Event()
        failures = []
        runners = [Runner(index, "increment" if index % 2 == 0 else "absolute", self.daemon.port, self.tasks[index],
                          random.Random(f"{self.seed}-{self.durability}-{self.round_number}-{index}"), killed,
                          failures, self.round_number)
                   for index in range(self.runner_count)]
        # An early kill now and then, right as the runners connect; a late one now and then,
        # once the stall sweeper (1 s timeout) has flagged the tasks no runner updates.
        kind = self.rng.random()
        if kind < 0.1:
            delay = self.rng.uniform(0, 0.03)
        elif kind < 0.1 + self.late_kill_chance:
            delay = self.rng.uniform(1.5, 3)
        else:
            delay = self.rng.uniform(self.minimum_delay, self.maximum_delay)
        during_stop = self.rng.random() < self.stop_kill_chance
        stop_delay = self.rng.uniform(0, 0.02)
        subscriber = Subscriber(self.daemon.port, killed)
        subscriber.start()
        subscriber.ready.wait(timeout=30)
        for runner in runners:
            runner.start()
        time.sleep(delay)
        killed.set()
        if during_stop:
            statistics.stops_begun += 1
            if self.daemon.terminate_then_kill(stop_delay):
                statistics.kills_during_stop += 1
            elif self.daemon.process.returncode != 0:
                self.fail(f"headwayd stopped by SIGTERM exited with {self.daemon.process.returncode}")
        else:
            self.daemon.kill()
        for runner in runners:
            runner.join(timeout=60)
            if runner.is_alive():
                failures.append(f"runner {runner.index} did not end after the kill")
        subscriber.join(timeout=60)
        if subscriber.is_alive() or subscriber.error:
            failures.append(f"the event stream's subscriber: {subscriber.error or 'did not end after the kill'}")
        statistics.events_seen += subscriber.events
        statistics.subscribers_cut_off += subscriber.cut_off
        for text in failures:
            self.fail(text)
        in_flight = [runner.in_flight for runner in runners if runner.in_flight is not None]
        if self.after_kill is not None:
            self.after_kill(self.daemon.database)
        statistics.updates_acknowledged += sum(runner.acknowledged_updates for runner in runners)
        statistics.finishes_acknowledged += sum(runner.acknowledged_finishes for runner in runners)
        statistics.registrations_acknowledged += sum(runner.acknowledged_registrations for runner in runners)
        statistics.refused += sum(runner.refused for runner in runners)
        for runner in runners:
            for key, count in runner.refusals.items():
                statistics.refusals[key] = statistics.refusals.get(key, 0) + count
        statistics.reconnects += sum(runner.reconnects for runner in runners)
        self.verify(in_flight, subscriber)
        statistics.rounds += 1
        self.log(f"[{self.durability}] round {self.round_number}: killed after {delay * 1000:.0f} ms"
                 f"{' (SIGTERM first)' if during_stop else ''}, "
                 f"{sum(runner.acknowledged_updates for runner in runners)} updates acknowledged, "
                 f"{len(in_flight)} in flight; failures so far {len(statistics.failures)}")

    def verify(self, in_flight, subscriber):
        """The checks after a kill: the raw files (and what the event stream showed), then
        the restarted daemon, then each in-flight request sent again."""
        tasks = self.all_tasks()
        raw_failures, raw_rows = raw_check(self.daemon.database, self.directory / "scratch",
                                           self.statistics.wal_frames)
        for text in raw_failures:
            self.fail(f"raw file: {text}")
        if raw_failures and not raw_rows:
            return
        failures, raw_outcomes = compare("raw file", tasks, raw_rows, in_flight)
        failures += subscriber.failures(raw_rows)
        for text in failures:
            self.fail(text)
        self.daemon.start()
        client = Client(self.daemon.port)
        try:
            served, total_size = client.all_tasks()
            if total_size != len(served):
                self.fail(f"API: total_size {total_size} but {len(served)} tasks listed")
            # Flagged by the stall sweeper (its own writes) before the kill.
            self.statistics.stalled_seen += sum(1 for task in served.values() if task["stalled"])
            failures, outcomes = compare("API", tasks, served, in_flight)
            for text in failures:
                self.fail(text)
            if outcomes != raw_outcomes:
                self.fail(f"the raw file and the daemon disagree on what was applied: {raw_outcomes} vs {outcomes}")
            for id, row in raw_rows.items():
                task = served.get(id)
                fields = ("completed", "seq", "label", "state", "parent_id", "total")
                if task is not None and any(row[field] != task[field] for field in fields):
                    self.fail(f"{id}: the raw file has {[row[field] for field in fields]}, "
                              f"the daemon serves {[task[field] for field in fields]}")
            for text in parent_failures(served):
                self.fail(text)
            for operation in in_flight:
                if operation.task.id in outcomes:
                    self.resend(client, operation, outcomes[operation.task.id])
        finally:
            client.close()

    def resend(self, client, operation, applied):
        """Sends an in-flight request again with its same seq: a repeat if it was applied,
        applied now if not."""
        task, statistics = operation.task, self.statistics
        status, unchanged, data = client.request("POST", operation.path, operation.body)
        if operation.kind == "register":
            expected = 200 if applied else 201
            if status != expected:
                self.fail(f"{operation.describe()} sent again: {status} (expected {expected}): {data[:300]!r}")
            task.registered = True
            if applied:
                statistics.registrations_in_flight_applied += 1
            else:
                statistics.registrations_in_flight_not_applied += 1
            return
        if status != 200:
            self.fail(f"{operation.describe()} sent again: {status}: {data[:300]!r}")
            return
        reply = json.loads(data)
        stored = (reply["completed"], reply["seq"], reply["label"], reply["state"])
        if unchanged != applied:
            self.fail(f"{operation.describe()} sent again: Headway-Unchanged {unchanged}, "
                      f"but it had {'' if applied else 'not '}been applied")
        if stored != operation.after:
            self.fail(f"{operation.describe()} sent again: the task is {stored}, expected {operation.after}")
        task.completed, task.seq, task.label, task.state_name = operation.after
        if applied:
            statistics.in_flight_applied += 1
        else:
            statistics.in_flight_not_applied += 1

    def finish(self):
        """A clean stop (exit status 0) and a last check of the database as it is left."""
        if self.daemon.process is None or self.daemon.process.poll() is not None:
            self.daemon.start()
        status = self.daemon.stop()
        if status != 0:
            self.fail(f"headwayd exited with {status} after SIGTERM")
        failures, rows = raw_check(self.daemon.database, self.directory / "scratch")
        for text in failures:
            self.fail(f"after the clean stop: {text}")
        failures, _ = compare("after the clean stop", self.all_tasks(), rows, [])
        for text in failures:
            self.fail(text)


def creation_kills(binary, directory, seed, count, log=None):
    """Kills headwayd `count` times while it creates and migrates a new database (a
    random moment in the 150 ms after the file appears), each time on a fresh one; then the file as the kill
    left it must pass `PRAGMA integrity_check` and record only whole migrations, and the
    daemon must start on it, finish migrating and be ready. Returns (failures, how many
    kills left the schema at each version: None when no database file existed yet)."""
    rng = random.Random(f"{seed}-creation")
    failures, versions = [], {}
    for number in range(count):
        folder = pathlib.Path(directory) / f"creation-{number}"
        folder.mkdir(parents=True, exist_ok=True)
        daemon = Daemon(binary, folder, "full")
        daemon.spawn()
        deadline = time.monotonic() + 30
        while not daemon.database.exists() and daemon.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.0005)
        time.sleep(rng.uniform(0, 0.15))
        daemon.kill()
        version = None
        if daemon.database.exists() and daemon.database.stat().st_size > 0:
            copy = copy_as_left(daemon.database, folder / "scratch")
            integrity = sqlite3(copy, "PRAGMA integrity_check").strip()
            if integrity != "ok":
                failures.append(f"creation kill {number}: PRAGMA integrity_check: {integrity[:500]}")
                continue
            tables = sqlite3(copy, "SELECT name FROM sqlite_schema WHERE type = 'table'").split()
            version = int(sqlite3(copy, "SELECT max(version) FROM schema_migrations").strip() or 0) \
                if "schema_migrations" in tables else 0
            # A migration's tables exist exactly when it is recorded.
            expected = {1: "tasks", 2: "tombstones", 3: "history", 5: "tokens", 7: "webhooks"}
            for migration, table in expected.items():
                if (table in tables) != (version >= migration):
                    failures.append(f"creation kill {number}: table {table} {'present' if table in tables else 'absent'}"
                                    f" with schema version {version}")
        versions[version] = versions.get(version, 0) + 1
        try:
            daemon.start()
            status, _, body = Client(daemon.port).request("GET", "/readyz")
            if status != 200:
                failures.append(f"creation kill {number}: /readyz {status} after the restart: {body[:200]!r}")
            if daemon.stop() != 0:
                failures.append(f"creation kill {number}: the restarted daemon did not stop cleanly")
            problems, _ = raw_check(daemon.database, folder / "scratch")
            failures += [f"creation kill {number}, after the restart: {problem}" for problem in problems]
        except RuntimeError as error:
            failures.append(f"creation kill {number}: no restart: {error}")
        finally:
            if daemon.process.poll() is None:
                daemon.kill()
        if log:
            log(f"creation kill {number}: schema version {version} at the kill")
    return failures, versions

