#!/usr/bin/env python3
"""Stall detection with many running tasks: the sweeper's idle cost and its lateness.

Starts the release headwayd (pinned to CPU 0), subscribes to the event stream, registers
TASKS running tasks (8 keep-alive connections) whose stall timeouts are spread over a
window that starts after registration ends, then:
  1. measures the daemon's CPU while nothing is due (the sweeper still looks 4 times a
     second), per thread and in all;
  2. waits for every `task.stalled` event and measures its lateness: arrival at the
     subscriber minus the deadline (`stalled_since`, which is the deadline itself).

    bench/stall-sweeper.py [--tasks 100000] [--idle 10] [--spread 30]
"""
import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("HEADWAYD", os.path.join(ROOT, ".build/release/headwayd"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thread_cpu(pid):
    """CPU seconds per thread name (nanosecond precision, from schedstat)."""
    per = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                name = comm.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                nanoseconds = int(stat.read().split()[0])
        except OSError:
            continue
        per[name] = per.get(name, 0) + nanoseconds / 1e9
    return per


def parse_time(text):
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle measurement")
    parser.add_argument("--spread", type=float, default=30.0, help="deadlines spread over this many seconds")
    args = parser.parse_args()
    if os.cpu_count() and os.cpu_count() >= 2:
        os.sched_setaffinity(0, {1})

    work = tempfile.mkdtemp()
    port = free_port()
    daemon = subprocess.Popen(
        ["taskset", "-c", "0", BINARY, "--listen", f"127.0.0.1:{port}", "--db", f"{work}/stall.db",
         "--durability", "normal", "--log-level", "warn"])
    try:
        for _ in range(400):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.025)

        # The subscriber records when each stall flag arrives.
        stalls = {}
        reader_ready = threading.Event()

        def read_events():
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            raw, body = b"", b""
            reader_ready.set()
            head_done = False
            while len(stalls) < args.tasks:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                arrived = time.time()
                raw += chunk
                if not head_done:
                    if b"\r\n\r\n" not in raw:
                        continue
                    raw = raw.split(b"\r\n\r\n", 1)[1]
                    head_done = True
                # Undo the chunked transfer encoding.
                while True:
                    line_end = raw.find(b"\r\n")
                    if line_end < 0:
                        break
                    size = int(raw[:line_end].split(b";")[0], 16)
                    if len(raw) < line_end + 2 + size + 2:
                        break
                    body += raw[line_end + 2:line_end + 2 + size]
                    raw = raw[line_end + 2 + size + 2:]
                frames = body.split(b"\n\n")
                body = frames.pop()
                for frame in frames:
                    if b"event: task.stalled" not in frame:
                        continue
                    data = json.loads(frame[frame.index(b"data: ") + 6:])
                    stalls[data["id"]] = arrived - parse_time(data["stalled_since"])

        reader = threading.Thread(target=read_events, daemon=True)
        reader.start()
        reader_ready.wait()

        # Deadlines: registration takes a while, so they start `lead` seconds from now.
        lead = 15 + args.tasks / 4000
        first_deadline = time.time() + lead
        counter = iter(range(args.tasks))
        lock = threading.Lock()

        def register():
            api = http.client.HTTPConnection("127.0.0.1", port)
            while True:
                with lock:
                    index = next(counter, None)
                if index is None:
                    return
                deadline = first_deadline + (index % 1000) / 1000 * args.spread
                timeout = max(1.0, deadline - time.time())
                body = json.dumps({"id": f"t{index}", "name": f"Job {index}", "total": 1000,
                                   "stall_timeout_seconds": round(timeout, 3)})
                api.request("POST", "/v1/tasks", body=body, headers={"Content-Type": "application/json"})
                response = api.getresponse()
                response.read()
                assert response.status == 201, response.status

        started = time.time()
        threads = [threading.Thread(target=register) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        registered_in = time.time() - started
        print(f"tasks registered          {args.tasks} running, in {registered_in:.1f} s")
        if time.time() + args.idle + 1 > first_deadline:
            print("warning: registration was slow; the idle window overlaps the first deadlines")

        time.sleep(1)
        before, t0 = thread_cpu(daemon.pid), time.time()
        time.sleep(args.idle)
        after, elapsed = thread_cpu(daemon.pid), time.time() - t0
        total = sum(after.values()) - sum(before.values())
        print(f"daemon CPU while idle     {100 * total / elapsed:.3f}% of a core over {elapsed:.0f} s "
              f"({args.tasks} running tasks, none due; sweeper looks every 0.25 s)")
        for name in sorted(after):
            used = after[name] - before.get(name, 0)
            if used > 0:
                print(f"    thread {name:<22} {100 * used / elapsed:.3f}%")

        last_deadline = first_deadline + args.spread
        while len(stalls) < args.tasks and time.time() < last_deadline + 30:
            time.sleep(0.5)
        lateness = sorted(stalls.values())
        print(f"stall flags received      {len(lateness)}/{args.tasks}")
        if lateness:
            p = lambda q: lateness[min(len(lateness) - 1, int(len(lateness) * q))]
            print(f"lateness after deadline   p50 {statistics.median(lateness) * 1000:.0f} ms, "
                  f"p99 {p(0.99) * 1000:.0f} ms, max {lateness[-1] * 1000:.0f} ms, min {lateness[0] * 1000:.0f} ms")
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            print(f"daemon stopped            exit {daemon.wait(timeout=60)}")
        except subprocess.TimeoutExpired:
            daemon.kill()


if __name__ == "__main__":
    main()
