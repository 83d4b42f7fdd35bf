#!/usr/bin/env python3
"""What a dashboard's stream costs the daemon: the stock page's stream before it asked only
for what it shows (`/v1/events?min_duration=2`, every task) against the stream it opens
now (the 20 tasks of its page and `new_roots=true`), with TASKS tasks changing at RATE
updates a second (`POST /v1/progress` batches of 100, every update stamped), read by
SUBSCRIBERS streams (bench/sse-subscribers.c).

Prints, for each shape in turn (alternated ROUNDS times on the same machine state): the
events each stream received per second, the daemon's CPU (user + system, from /proc) per
second of wall clock, the updates applied per second and the load average; then the
daemon's CPU per read of the counts the page polls (GET /v1/tasks/summary). Run from the
repository:

    python3 bench/dashboard-streams.py [--tasks 10000] [--rate 5000] [--subscribers 200]
                                       [--seconds 10] [--rounds 2] [--headwayd PATH] [--no-new-roots]
"""
import argparse
import os
import pathlib
import sys
import tempfile
import threading
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "Tests/integration"))
import conftest  # noqa: E402
from servers import SubscriberProcess  # noqa: E402


def cpu_seconds(pid):
    """The process's user + system CPU time, in seconds."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def daemon_pid(port):
    """The pid of the headwayd listening on `port` (run_headwayd does not hand it out)."""
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if command and command[0].endswith(b"headwayd") and f"127.0.0.1:{port}".encode() in command:
            return int(entry.name)
    raise RuntimeError("headwayd not found")


class Load:
    """RATE stamped progress updates a second, spread over every task, in batches of 100."""

    def __init__(self, base, tasks, rate):
        self.base, self.tasks, self.rate = base, tasks, rate
        self.stop = threading.Event()
        self.applied = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        value, index, batch = 0, 0, 100
        interval = batch / self.rate
        with httpx.Client(base_url=self.base, timeout=30) as client:
            next_at = time.monotonic()
            while not self.stop.is_set():
                value += 1
                updates = []
                for _ in range(batch):
                    updates.append({"task_id": f"t{index:05d}", "completed": value, "label": f"t={time.time_ns()}"})
                    index = (index + 1) % self.tasks
                reply = client.post("/v1/progress", json={"updates": updates})
                assert reply.status_code == 200, reply.text
                self.applied += batch
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))

    def close(self):
        self.stop.set()
        self.thread.join(timeout=30)


def measure(base, pid, port, load, request, subscribers, seconds):
    clients = SubscriberProcess(port, subscribers, request)
    try:
        time.sleep(1.0)
        cpu_before, applied_before, start = cpu_seconds(pid), load.applied, time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - start
        cpu = (cpu_seconds(pid) - cpu_before) / elapsed
        applied = (load.applied - applied_before) / elapsed
        summary = clients.finish()
    finally:
        clients.close()
    return {"events_per_stream_s": summary["delivered"] / max(1, summary["connected"]) / (elapsed + 1.0),
            "connected": summary["connected"], "daemon_cpu": cpu, "updates_s": applied,
            "load": os.getloadavg()[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=5000)
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--headwayd", default=str(ROOT / ".build/release/headwayd"))
    parser.add_argument("--no-new-roots", action="store_true",
                        help="omit new_roots=true (a headwayd without it; the load creates no task, so it adds no event)")
    options = parser.parse_args()
    conftest.HEADWAYD = options.headwayd
    with tempfile.TemporaryDirectory() as folder, conftest.run_headwayd(pathlib.Path(folder), "--max-subscribers",
                                                                        "20000") as base:
        port = int(base.rsplit(":", 1)[1])
        pid = daemon_pid(port)
        with httpx.Client(base_url=base, timeout=30) as client:
            for index in range(options.tasks):
                reply = client.post("/v1/tasks", json={"id": f"t{index:05d}", "name": f"Task {index}", "total": 10**9,
                                                       "stall_timeout_seconds": 3600})
                assert reply.status_code == 201, reply.text
        page = "&".join(f"task=t{index:05d}" for index in range(options.tasks - 1, options.tasks - 21, -1))
        shapes = {
            "every task (before)": "/v1/events?min_duration=2",
            "its page (after)": f"/v1/events?min_duration=2&{page}" + ("" if options.no_new_roots else "&new_roots=true"),
        }
        load = Load(base, options.tasks, options.rate)
        try:
            time.sleep(2)
            for round_number in range(options.rounds):
                for name, target in shapes.items():
                    request = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()
                    for count in (1, options.subscribers):
                        result = measure(base, pid, port, load, request, count, options.seconds)
                        print(f"round {round_number + 1}  {name:22} {count:5} streams ({result['connected']} to the end): "
                              f"{result['events_per_stream_s']:8.1f} events/stream/s  "
                              f"daemon CPU {result['daemon_cpu'] * 100:5.1f}%  "
                              f"updates {result['updates_s']:6.0f}/s  load {result['load']:.2f}", flush=True)
        finally:
            load.close()
        # What the page polls instead of hearing every change: the counts by state.
        with httpx.Client(base_url=base, timeout=30) as client:
            reads = 2000
            before = cpu_seconds(pid)
            for index in range(reads):
                assert client.get("/v1/tasks/summary" + ("?root=true" if index % 2 else "")).status_code == 200
            per_read = (cpu_seconds(pid) - before) / reads
        print(f"GET /v1/tasks/summary: {per_read * 1e6:.0f} µs of daemon CPU a read (with and without root=true), "
              f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
