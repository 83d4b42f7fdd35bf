#!/usr/bin/env python3
"""GET /v1/tasks page latency with 1,000 and with 1,000,000 tasks stored; searches (`q`)
and GET /v1/tasks/summary beside a plain page.

Creates each database by letting headwayd migrate it, then filling `tasks` directly with
Python's sqlite3 (90% finished, 10% running, a tenth of those children of a parent),
starts one release daemon on each (both pinned to CPU 0, this client on CPU 1) and times
pages over one keep-alive connection to each. The sizes take turns, a round of pages
each, so that a slower minute of the machine falls on all of them alike. Beside the
latency it reports the daemon's CPU time per page (every thread's time on a CPU, from
/proc/PID/task/*/schedstat): on a machine whose other work delays the daemon, the
latency measures that work too, and the CPU time does not.

Tasks are named "Task N" with ids "task-N" (or "parent-N"), so the searches match: a name
of one task (`q=task 424242`: one match at 1,000,000), part of an id (`q=task-4242`: 111),
a short text (`q=42`: every N holding "42", about 5%), and a common one with a filter
(`q=ask 42&state=running`: about 111,000 matches, a tenth of them running). The second
table compares each with the plain page at the largest size; the first search is the
one `make bench` judges (a search for a task by name: ≤ 2 × a plain page).

    bench/list-latency.py [--sizes 1000,1000000] [--requests 300] [--databases DIR]

`--databases DIR` keeps the filled databases in DIR and starts later runs from copies of
them (filling 1,000,000 tasks takes minutes), for runs of two builds taking turns.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("HEADWAYD", os.path.join(ROOT, ".build/release/headwayd"))
QUERIES = [
    "/v1/tasks",
    "/v1/tasks?state=running&state=pending",
    "/v1/tasks?state=running&stalled=false&root=true",
    "/v1/tasks?state=succeeded&page_size=500",
    "/v1/tasks?parent_id=parent-0",
]
SEARCHES = [
    "/v1/tasks?q=task%20424242",
    "/v1/tasks?q=task-4242",
    "/v1/tasks?q=42",
    "/v1/tasks?q=ask%2042&state=running",
    "/v1/tasks/summary",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(db, port):
    pin = ["taskset", "-c", "0"] if (os.cpu_count() or 1) >= 2 else []
    process = subprocess.Popen([*pin, BINARY, "--listen", f"127.0.0.1:{port}", "--db", db, "--log-level", "warn"])
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            time.sleep(0.025)
    raise SystemExit("headwayd did not start")


def stop(process):
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


def fill(db, count):
    connection = sqlite3.connect(db)
    now = int(time.time() * 1000)
    parents = max(1, count // 100)

    def rows():
        for i in range(count):
            running = i % 10 == 0
            parent = f"parent-{i % parents}" if running and i % 100 == 0 and i >= parents * 100 else None
            task_id = f"parent-{i}" if i < parents else f"task-{i}"
            yield (task_id, f"Task {i}", parent, "running" if running else "succeeded", i % 1000,
                   1000, 30000, now - count + i, now - count + i, now - count + i, "{}", 0 if parent else 1)

    connection.executemany(
        "INSERT INTO tasks (id, name, parent_id, state, completed, total, stall_timeout_ms, created_at,"
        " updated_at, last_signal_at, definition, is_root) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows())
    connection.commit()
    connection.close()


class Pages:
    """Pages of one query from one daemon over one keep-alive connection, walking forward
    through the listing (back to the first page after the last)."""

    def __init__(self, port, path, pid):
        self.connection = http.client.HTTPConnection("127.0.0.1", port)
        self.path = path
        self.pid = pid
        self.token = None
        self.times = []
        self.cpu_ns = 0

    def fetch(self, count, keep=True):
        cpu_before = cpu_ns(self.pid)
        for _ in range(count):
            query = self.path + (("&" if "?" in self.path else "?") + "page_token=" + self.token if self.token else "")
            try:
                started = time.perf_counter()
                self.connection.request("GET", query)
                response = self.connection.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # The daemon closes a connection left idle past its head timeout while the
                # other sizes' slower pages are timed: connect again, and time the retry.
                self.connection.close()
                started = time.perf_counter()
                self.connection.request("GET", query)
                response = self.connection.getresponse()
            body = response.read()
            elapsed = (time.perf_counter() - started) * 1000
            assert response.status == 200, body
            if keep:
                self.times.append(elapsed)
            self.token = json.loads(body).get("next_page_token")
        if keep:
            self.cpu_ns += cpu_ns(self.pid) - cpu_before

    def summary(self):
        """p50 and p99 latency, and the daemon's mean CPU time per page, in ms."""
        self.connection.close()
        times = sorted(self.times)
        return statistics.median(times), times[int(len(times) * 0.99) - 1], self.cpu_ns / len(times) / 1e6


def cpu_ns(pid):
    """Nanoseconds every thread of process `pid` has spent on a CPU so far (threads that
    ended take theirs with them; the daemon's serving threads live as long as it does)."""
    total = 0
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--databases", help="a folder keeping the filled databases, copied by each run")
    args = parser.parse_args()
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {1})
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as work:
        ports, pids, processes = {}, {}, []
        try:
            for size in sizes:
                db = os.path.join(work, f"list-{size}.db")
                kept = args.databases and os.path.join(args.databases, f"list-{size}.db")
                if not kept or not os.path.exists(kept):
                    stop(start(db, free_port()))
                    fill(db, size)
                    if kept:
                        shutil.copyfile(db, kept)
                else:
                    shutil.copyfile(kept, db)
                    os.chmod(db, 0o600)  # as headwayd wants its file (it warns otherwise)
                ports[size] = free_port()
                processes.append(start(db, ports[size]))
                pids[size] = processes[-1].pid
            turn = 20
            for path in QUERIES + SEARCHES:
                pages = {size: Pages(ports[size], path, pids[size]) for size in sizes}
                for size in sizes:
                    pages[size].fetch(20, keep=False)  # warm up
                for _ in range(0, args.requests, turn):
                    for size in sizes:
                        pages[size].fetch(turn)
                for size in sizes:
                    results[(size, path)] = pages[size].summary()
                print(f"{path}: " + ", ".join(f"{size:,}: {results[(size, path)][0]:.2f} ms, CPU {results[(size, path)][2]:.3f} ms"
                                              for size in sizes),
                      file=sys.stderr, flush=True)
        finally:
            for process in processes:
                stop(process)
    sizes = sorted({size for size, _ in results})
    print(f"GET /v1/tasks page latency, ms (p50 / p99), and the daemon's CPU per page, ms; {args.requests} pages each")
    print("| query | " + " | ".join(f"{s:,} tasks" for s in sizes) + " | ratio p50 | ratio CPU |")
    print("|---|" + "---|" * (len(sizes) + 2))
    for path in QUERIES:
        cells = [f"{results[(s, path)][0]:.2f} / {results[(s, path)][1]:.2f}, CPU {results[(s, path)][2]:.3f}" for s in sizes]
        ratio = results[(sizes[-1], path)][0] / results[(sizes[0], path)][0]
        cpu_ratio = results[(sizes[-1], path)][2] / results[(sizes[0], path)][2]
        print(f"| `{path}` | " + " | ".join(cells) + f" | {ratio:.2f} | {cpu_ratio:.2f} |")
    largest = sizes[-1]
    plain, _, plain_cpu = results[(largest, "/v1/tasks")]
    print()
    print(f"Searches and the summary beside a plain page (`/v1/tasks`): ms, p50 / p99 and the daemon's CPU per page;"
          f" ratios at {largest:,} tasks")
    print("| query | " + " | ".join(f"{s:,} tasks" for s in sizes) + " | p50 ÷ plain page p50 | CPU ÷ plain page CPU |")
    print("|---|" + "---|" * (len(sizes) + 2))
    for path in ["/v1/tasks"] + SEARCHES:
        cells = [f"{results[(s, path)][0]:.2f} / {results[(s, path)][1]:.2f}, CPU {results[(s, path)][2]:.3f}" for s in sizes]
        p50, _, cpu = results[(largest, path)]
        print(f"| `{path}` | " + " | ".join(cells) + f" | {p50 / plain:.2f} | {cpu / plain_cpu:.2f} |")
    judged_p50, _, judged_cpu = results[(largest, SEARCHES[0])]
    print(f"search page / plain page at {largest:,} tasks: {judged_p50 / plain:.2f} (p50), {judged_cpu / plain_cpu:.2f} (CPU)")

if __name__ == "__main__":
    main()
