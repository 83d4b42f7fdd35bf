"""Outside readers never make a write fail: a real `sqlite3` shell holding a read
transaction while runners write, and backups taken while they write (`headway db backup`,
`VACUUM INTO` from the shell). Once the reader lets go, the `-wal` file comes back under
`--wal-size-limit` while the runners go on writing."""
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request

from conftest import ROOT, run_headwayd

HEADWAY = os.environ.get("HEADWAY_CLI", str(ROOT / ".build/debug/headway"))
# Above what the WAL reaches under steady load (the checkpoint after a batch resets it
# after 1,000 pages, about 4 MiB), so only a held reader takes it past.
WAL_LIMIT = 8 << 20
HOLD_SECONDS = 15


def call(base, method, path, body=None):
    """(status, JSON reply) of one request; an HTTP error is a reply too."""
    request = urllib.request.Request(base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


class Runners:
    """Runner threads, each registering tasks one after the other and reporting progress
    on each (a label long enough to fill pages), until stopped. Keeps what was
    acknowledged (task id -> completed) and every failed write."""

    def __init__(self, base, count=4, updates_per_task=20):
        self.base = base
        self.updates_per_task = updates_per_task
        self.lock = threading.Lock()
        self.acknowledged = {}
        self.updates = 0
        self.failures = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(index,)) for index in range(count)]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def write(self, path, body, expected):
        try:
            status, reply = call(self.base, "POST", path, body)
        except OSError as error:
            status, reply = None, repr(error)
        if status != expected:
            with self.lock:
                self.failures.append((path, status, reply))
            return False
        return True

    def run(self, index):
        task = 0
        while not self.stopping.is_set():
            task += 1
            task_id = f"runner-{index}-{task}"
            if not self.write("/v1/tasks", {"id": task_id, "name": f"Runner {index}", "total": 10**9}, 201):
                return
            with self.lock:
                self.acknowledged[task_id] = 0
            for completed in range(1, self.updates_per_task + 1):
                if self.stopping.is_set():
                    return
                body = {"completed": completed, "label": f"step {completed} " + "x" * 300}
                if not self.write(f"/v1/tasks/{task_id}/progress", body, 200):
                    return
                with self.lock:
                    self.acknowledged[task_id] = completed
                    self.updates += 1

    def snapshot(self):
        """What has been acknowledged so far (a copy)."""
        with self.lock:
            return dict(self.acknowledged)

    def wait_for_updates(self, count, seconds=30):
        """Waits (bounded) until `count` more updates have been acknowledged."""
        with self.lock:
            target = self.updates + count
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.failures:
            with self.lock:
                if self.updates >= target:
                    return
            time.sleep(0.05)
        assert not self.failures, self.failures[:3]
        raise AssertionError(f"fewer than {count} updates acknowledged within {seconds} s")


def wal_bytes(database):
    try:
        return os.path.getsize(f"{database}-wal")
    except FileNotFoundError:
        return 0


def stored_completed(database):
    """task id -> completed, read from a database file (a copy)."""
    result = subprocess.run(["sqlite3", "-json", str(database), "SELECT id, completed FROM tasks"],
                            capture_output=True, text=True, check=True, timeout=30)
    return {row["id"]: row["completed"] for row in json.loads(result.stdout or "[]")}


def assert_all_stored(acknowledged, stored):
    missing = [task for task, completed in acknowledged.items() if stored.get(task, -1) < completed]
    assert not missing, f"{len(missing)} acknowledged tasks or updates missing, e.g. {missing[:3]}"


class SQLiteShell:
    """A real `sqlite3` shell on the database, driven through a pipe, one line at a time."""

    def __init__(self, database):
        self.process = subprocess.Popen(["sqlite3", str(database)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def ask(self, sql):
        """Runs `sql`, which prints one line, and returns that line."""
        self.process.stdin.write(sql + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def quit(self):
        self.process.stdin.write(".quit\n")
        self.process.stdin.flush()
        assert self.process.wait(timeout=10) == 0

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        """A shell left running by a failed assertion would hold its lock: ended here."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def test_a_reader_holding_a_snapshot_fails_no_write_and_the_wal_comes_back(tmp_path):
    database = tmp_path / "headway.db"
    with run_headwayd(tmp_path, "--wal-size-limit", str(WAL_LIMIT)) as base, Runners(base) as runners:
        runners.wait_for_updates(50)
        with SQLiteShell(database) as shell:
            seen = shell.ask("BEGIN; SELECT sum(completed) FROM tasks;")
            updates_before = runners.updates
            held_since = time.monotonic()
            peak = 0
            # Hold the snapshot for HOLD_SECONDS, and on until the WAL is well past the limit
            # (at most 30 s): then its coming back proves something.
            while time.monotonic() - held_since < 30 and not runners.failures:
                peak = max(peak, wal_bytes(database))
                if time.monotonic() - held_since >= HOLD_SECONDS and peak > WAL_LIMIT * 3 // 2:
                    break
                time.sleep(0.25)
            assert not runners.failures, runners.failures[:3]
            assert runners.updates > updates_before, "writes went on while the reader held its snapshot"
            assert shell.ask("SELECT sum(completed) FROM tasks;") == seen, "the reader still saw its snapshot"
            assert peak > WAL_LIMIT, f"the held snapshot kept the WAL from being reset ({peak} bytes at most)"
            assert shell.ask("COMMIT; SELECT 'released';") == "released"
            shell.quit()
        # The runners go on writing; the WAL comes back under the limit (bounded wait).
        size = wal_bytes(database)
        for _ in range(200):
            if size <= WAL_LIMIT:
                break
            time.sleep(0.1)
            size = wal_bytes(database)
        assert size <= WAL_LIMIT, f"the WAL stayed at {size} bytes after the reader let go (peak {peak})"
        runners.wait_for_updates(20)
        runners.stop()
        assert not runners.failures, runners.failures[:3]
        acknowledged = runners.snapshot()
    assert_all_stored(acknowledged, stored_completed(database))


def test_backups_during_writes_fail_no_write_and_hold_what_was_acknowledged(tmp_path):
    database = tmp_path / "headway.db"
    with run_headwayd(tmp_path) as base, Runners(base) as runners:
        runners.wait_for_updates(200)
        backups = {
            "headway": lambda copy: [HEADWAY, "db", "backup", "--db", str(database), str(copy)],
            # Not the shell's `.backup`: it copies 100 pages a step and starts over whenever
            # the daemon commits between two steps, so under steady writes it may never end
            # (docs/wal.md). `VACUUM INTO` copies from one snapshot, as `headway db backup`.
            "sqlite3": lambda copy: ["sqlite3", str(database), f"VACUUM INTO '{copy}'"],
        }
        copies = {}
        for tool, command in backups.items():
            acknowledged = runners.snapshot()
            copy = tmp_path / f"copy-{tool}.db"
            result = subprocess.run(command(copy), capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, (tool, result.stdout, result.stderr)
            copies[tool] = (copy, acknowledged)
            runners.wait_for_updates(50)
        runners.stop()
        assert not runners.failures, runners.failures[:3]
    for tool, (copy, acknowledged) in copies.items():
        check = subprocess.run(["sqlite3", str(copy), "PRAGMA integrity_check"],
                               capture_output=True, text=True, timeout=30)
        assert check.stdout.strip() == "ok", (tool, check.stdout, check.stderr)
        assert_all_stored(acknowledged, stored_completed(copy))


def test_a_write_lock_held_outside_past_the_busy_timeout_is_503_database_busy(tmp_path):
    """Not a reader: a shell in `BEGIN IMMEDIATE` holds the write lock. The daemon's writer
    waits for it 5 s (SQLite's busy timeout), then answers the waiting writes 503
    `database_busy` with `Retry-After`, storing none of them; once the lock is let go,
    writes succeed again."""
    database = tmp_path / "headway.db"
    with run_headwayd(tmp_path) as base:
        status, _ = call(base, "POST", "/v1/tasks", {"id": "locked-out", "name": "Locked out", "total": 100})
        assert status == 201
        with SQLiteShell(database) as shell:
            assert shell.ask("BEGIN IMMEDIATE; SELECT 'locked';") == "locked"
            request = urllib.request.Request(base + "/v1/tasks/locked-out/progress", method="POST",
                                             data=json.dumps({"completed": 1}).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(request, timeout=30)
                raise AssertionError("a write went through while another process held the write lock")
            except urllib.error.HTTPError as error:
                assert error.code == 503
                assert error.headers["Retry-After"] == "1"
                assert json.load(error)["code"] == "database_busy"
            assert shell.ask("COMMIT; SELECT 'unlocked';") == "unlocked"
            shell.quit()
        assert call(base, "GET", "/v1/tasks/locked-out")[1]["completed"] == 0, "the refused write changed nothing"
        status, task = call(base, "POST", "/v1/tasks/locked-out/progress", {"completed": 1})
        assert (status, task["completed"]) == (200, 1)
