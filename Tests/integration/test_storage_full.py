"""The storage under the database refuses writes while runners write: a small tmpfs filled
up, and an ext4 image that goes read-only after an error. Writes answer 503 with a problem
(`storage_full`, `storage_read_only`) and `Retry-After`; reads and event streams go on;
every acknowledged update is stored and nothing else; a full disk with space freed again
takes writes without a restart. Needs root (mount); skipped where mounting is refused."""
import collections
import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import threading
import time

import httpx
import pytest
from httpx_sse import connect_sse

from conftest import HEADWAYD, free_port, wait_for_port

RUNNERS = 3


@contextlib.contextmanager
def mounted(directory, *mount_arguments, skip_if_refused=True):
    """Mounts a filesystem on `directory` (`mount ARGUMENTS DIRECTORY`), unmounted at the end;
    skips the test if the mount is refused (not root, no loop devices), unless told not to
    (a filesystem mounted once already must mount again)."""
    directory.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", *mount_arguments, str(directory)], capture_output=True, text=True)
    if result.returncode != 0:
        assert skip_if_refused, result.stderr
        pytest.skip(f"mount {' '.join(mount_arguments)} refused: {result.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=True)


@contextlib.contextmanager
def daemon(database, log_path):
    """headwayd on a free port with its database at `database` (durability full) and its
    log outside the filesystem under test; yields its base URL; stops it with SIGTERM."""
    port = free_port()
    with open(log_path, "a") as log:
        process = subprocess.Popen(
            [HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", str(database), "--durability", "full",
             "--sse-heartbeat", "1"],
            stderr=log)
        try:
            wait_for_port(port, process, "headwayd")
            yield f"http://127.0.0.1:{port}"
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0, "headwayd did not stop cleanly"


class Runners:
    """Runner threads, each sending increments of 1 to its own task one request at a time
    until stopped; they count what was acknowledged (200) and each refusal by problem code.
    Any other answer, a refusal without Retry-After, or no answer at all ends the runner
    and is kept in `unexpected`."""

    def __init__(self, base, count):
        self.base = base
        self.task_ids = [f"runner-{index}" for index in range(count)]
        self.acknowledged = collections.Counter()
        self.refused = collections.Counter()
        self.unexpected = []
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        for task_id in self.task_ids:
            reply = httpx.post(f"{base}/v1/tasks", json={"id": task_id, "name": task_id, "total": 1_000_000})
            assert reply.status_code == 201, reply.text
        self.threads = [threading.Thread(target=self._run, args=(task_id,)) for task_id in self.task_ids]
        for thread in self.threads:
            thread.start()

    def _run(self, task_id):
        with httpx.Client(timeout=15) as client:
            for _ in range(200_000):
                if self.stopping.is_set():
                    return
                try:
                    reply = client.post(f"{self.base}/v1/tasks/{task_id}/progress", json={"increment": 1})
                except httpx.HTTPError as error:
                    return self._note_unexpected(f"{task_id}: no answer: {error!r}")
                if reply.status_code == 200:
                    with self.changed:
                        self.acknowledged[task_id] += 1
                        self.changed.notify_all()
                elif reply.status_code == 503 and "retry-after" in reply.headers:
                    with self.changed:
                        self.refused[reply.json()["code"]] += 1
                        self.changed.notify_all()
                else:
                    return self._note_unexpected(f"{task_id}: {reply.status_code} {reply.headers} {reply.text}")

    def _note_unexpected(self, what):
        with self.changed:
            self.unexpected.append(what)
            self.changed.notify_all()

    def wait_until(self, predicate, what, timeout=20):
        """Waits (at most `timeout` seconds) until `predicate()` holds, checked after every answer."""
        with self.changed:
            assert self.changed.wait_for(lambda: predicate() or self.unexpected, timeout), f"waited for {what}"
            assert not self.unexpected, self.unexpected

    def wait_for_more_acknowledged(self, count, what):
        """Waits until each runner has `count` more updates acknowledged than now."""
        with self.changed:
            before = dict(self.acknowledged)
        self.wait_until(lambda: all(self.acknowledged[task_id] >= before[task_id] + count
                                    for task_id in self.task_ids), what)

    def acknowledged_each(self, at_least):
        return all(self.acknowledged[task_id] >= at_least for task_id in self.task_ids)

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=30)
        assert not self.unexpected, self.unexpected


class Subscriber:
    """Reads /v1/events on one connection, on a thread, keeping every task event's data."""

    def __init__(self, base):
        self.tasks = {}
        self.snapshots = 0
        self.ended = False
        self.changed = threading.Condition()
        self.client = httpx.Client(timeout=httpx.Timeout(10.0, read=30.0))
        self.thread = threading.Thread(target=self._run, args=(base,), daemon=True)
        self.thread.start()

    def _run(self, base):
        try:
            with connect_sse(self.client, "GET", f"{base}/v1/events") as source:
                for event in source.iter_sse():
                    with self.changed:
                        if event.event == "snapshot":
                            self.snapshots += 1
                            for task in json.loads(event.data)["tasks"]:
                                self.tasks[task["id"]] = task
                        elif event.event.startswith("task."):
                            task = json.loads(event.data)
                            self.tasks[task["id"]] = task
                        self.changed.notify_all()
        except httpx.HTTPError:
            pass
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def wait_until(self, predicate, what, timeout=20):
        with self.changed:
            assert self.changed.wait_for(lambda: predicate() or self.ended, timeout), f"waited for {what}"
            assert not self.ended, "the event stream ended"

    def wait_for_values(self, completed_by_task):
        """Waits until the stream has carried each task's `completed` value given."""
        self.wait_until(lambda: all(self.tasks.get(task_id, {}).get("completed") == count
                                    for task_id, count in completed_by_task.items()),
                        "the last acknowledged changes on the event stream")

    def close(self):
        self.client.close()
        self.thread.join(timeout=10)


def fill(directory):
    """Writes a filler file in `directory` until the filesystem has no space left."""
    filler = directory / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 16, 1 << 12):
            for _ in range(100_000):
                try:
                    os.write(descriptor, b"\0" * size)
                except OSError as error:
                    assert error.errno == errno.ENOSPC
                    break
    finally:
        os.close(descriptor)
    return filler


def new_stream_gets_its_snapshot(base):
    """Opens another event stream and reads it up to its snapshot."""
    with httpx.Client(timeout=10) as client, connect_sse(client, "GET", f"{base}/v1/events") as source:
        assert source.response.status_code == 200
        for event in source.iter_sse():
            return event.event == "snapshot"
    return False


def readiness_reports_the_full_disk(base, seconds=10):
    """Whether /readyz answers 503 `not_ready` while the disk is full. The writer may win
    back a little space by itself (a WAL emptied after a refused batch: the log's
    storage.full / storage.writable pairs) and take a few writes until the runners fill it
    again; a probe that falls in such a moment says ready, and is kept for a second. So ask
    until a probe falls in a refusal, for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready = httpx.get(f"{base}/readyz")
        if ready.status_code == 503 and ready.json()["code"] == "not_ready":
            return True
        assert ready.status_code == 200, ready.text
        time.sleep(0.1)
    return False


def refused_metric(base, code):
    text = httpx.get(f"{base}/metrics").text
    match = re.search(r'^headway_updates_refused_total\{kind="progress",code="%s"\} (\d+)$' % code, text, re.M)
    return int(match.group(1)) if match else 0


def assert_stored_exactly(base, database, acknowledged):
    """Every task holds exactly the increments that were acknowledged, through the API and
    in the file, and the file is sound."""
    for task_id, count in acknowledged.items():
        assert httpx.get(f"{base}/v1/tasks/{task_id}").json()["completed"] == count, task_id
    rows = subprocess.run(["sqlite3", "-readonly", str(database),
                           "SELECT id, completed FROM tasks ORDER BY id; PRAGMA integrity_check;"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert rows == [f"{task_id}|{count}" for task_id, count in sorted(acknowledged.items())] + ["ok"]


def log_events(log_path, event):
    return [line for line in log_path.read_text().splitlines() if f" event={event} " in line]


def test_a_full_disk_refuses_writes_keeps_reads_and_streams_and_recovers_without_restart(tmp_path):
    log_path = tmp_path / "headwayd.log"
    with mounted(tmp_path / "small", "-t", "tmpfs", "-o", "size=2m", "tmpfs") as small:
        database = small / "headway.db"
        with daemon(database, log_path) as base:
            runners = Runners(base, RUNNERS)
            subscriber = Subscriber(base)
            try:
                runners.wait_until(lambda: runners.acknowledged_each(5), "acknowledged updates")
                filler = fill(small)
                runners.wait_until(lambda: runners.refused["storage_full"] >= 10 * RUNNERS, "refusals")
                assert set(runners.refused) == {"storage_full"}

                # Reads and event streams go on; the refusals are counted; not ready.
                with runners.changed:
                    refused_so_far = runners.refused["storage_full"]
                assert refused_metric(base, "storage_full") >= refused_so_far
                assert httpx.get(f"{base}/v1/tasks").status_code == 200
                assert httpx.get(f"{base}/v1/tasks/runner-0").status_code == 200
                assert new_stream_gets_its_snapshot(base)
                assert readiness_reports_the_full_disk(base)

                # Space freed: the same daemon takes writes again.
                os.unlink(filler)
                runners.wait_for_more_acknowledged(5, "writes after space was freed")
            finally:
                runners.stop()
            acknowledged = dict(runners.acknowledged)

            # The stream that stayed connected carries the last acknowledged change of each task.
            subscriber.wait_for_values(acknowledged)
            assert subscriber.snapshots == 1, "the stream was not reconnected"
            subscriber.close()
            assert_stored_exactly(base, database, acknowledged)
        with daemon(database, log_path) as base:
            assert_stored_exactly(base, database, acknowledged)

    # One line when the storage began refusing, one when it took writes again; none per request.
    full, writable = log_events(log_path, "storage.full"), log_events(log_path, "storage.writable")
    assert 1 <= len(full) <= 3 and len(writable) == len(full), full + writable
    assert not log_events(log_path, "request.failed")


def test_a_disk_filled_by_the_wal_itself_takes_writes_again_without_freeing_anything(tmp_path):
    """On a disk smaller than the writer's checkpoints need (about 4 MiB of WAL), the WAL
    of committed changes fills it; no commit succeeds, so no checkpoint after a batch runs:
    the daemon must checkpoint by itself to win back the space its own WAL holds."""
    log_path = tmp_path / "headwayd.log"
    with mounted(tmp_path / "small", "-t", "tmpfs", "-o", "size=2m", "tmpfs") as small:
        database = small / "headway.db"
        with daemon(database, log_path) as base:
            runners = Runners(base, RUNNERS)
            try:
                runners.wait_until(lambda: runners.refused["storage_full"] >= RUNNERS, "refusals", timeout=60)
                runners.wait_for_more_acknowledged(5, "writes after the refusals, with nothing freed")
            finally:
                runners.stop()
            assert set(runners.refused) == {"storage_full"}
            assert_stored_exactly(base, database, dict(runners.acknowledged))


def test_a_filesystem_gone_read_only_refuses_writes_and_keeps_reads_and_streams(tmp_path):
    image = tmp_path / "ext4.img"
    with open(image, "wb") as out:
        out.truncate(8 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", str(image)], check=True)
    log_path = tmp_path / "headwayd.log"
    with mounted(tmp_path / "disk", "-o", "loop,errors=remount-ro", str(image)) as disk:
        database = disk / "headway.db"
        with daemon(database, log_path) as base:
            runners = Runners(base, RUNNERS)
            subscriber = Subscriber(base)
            try:
                runners.wait_until(lambda: runners.acknowledged_each(5), "acknowledged updates")
                # An error of the filesystem: ext4 turns it read-only (errors=remount-ro).
                device = subprocess.run(["findmnt", "-no", "SOURCE", str(disk)], capture_output=True, text=True,
                                        check=True).stdout.strip()
                trigger = f"/sys/fs/ext4/{os.path.basename(device)}/trigger_fs_error"
                try:
                    with open(trigger, "w") as out:
                        out.write("the test turns the filesystem read-only")
                except OSError as error:
                    pytest.skip(f"the kernel refused to raise an ext4 error ({trigger}): {error}")
                runners.wait_until(lambda: runners.refused["storage_read_only"] >= 10 * RUNNERS, "refusals")
                assert set(runners.refused) == {"storage_read_only"}
                with runners.changed:
                    refused_so_far = runners.refused["storage_read_only"]
                assert refused_metric(base, "storage_read_only") >= refused_so_far
                assert httpx.get(f"{base}/v1/tasks").status_code == 200
                assert new_stream_gets_its_snapshot(base)
            finally:
                runners.stop()
            acknowledged = dict(runners.acknowledged)
            subscriber.wait_for_values(acknowledged)
            subscriber.close()
            for task_id, count in acknowledged.items():
                assert httpx.get(f"{base}/v1/tasks/{task_id}").json()["completed"] == count, task_id
    read_only = log_events(log_path, "storage.read_only")
    assert len(read_only) == 1 and "errno 30" in read_only[0], read_only
    assert not log_events(log_path, "request.failed")

    # The kernel keeps an ext4 that failed read-only until it is unmounted: checked and
    # mounted again, it holds every acknowledged update, and takes writes.
    checked = subprocess.run(["e2fsck", "-fy", str(image)], capture_output=True, text=True)
    assert checked.returncode in (0, 1), checked.stdout + checked.stderr  # 1: errors corrected
    with mounted(tmp_path / "disk", "-o", "loop", str(image), skip_if_refused=False) as disk:
        database = disk / "headway.db"
        with daemon(database, log_path) as base:
            # The commit that the error cut short may have put its frames on disk before the
            # filesystem turned read-only: its update (at most one per runner, which sends one
            # at a time) may be found stored, though it was answered 503.
            stored = {task_id: httpx.get(f"{base}/v1/tasks/{task_id}").json()["completed"] for task_id in acknowledged}
            for task_id, count in acknowledged.items():
                assert count <= stored[task_id] <= count + 1, (task_id, count, stored[task_id])
            assert_stored_exactly(base, database, stored)
            reply = httpx.post(f"{base}/v1/tasks/runner-0/progress", json={"increment": 1})
            assert reply.status_code == 200
