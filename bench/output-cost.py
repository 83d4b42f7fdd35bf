#!/usr/bin/env python3
"""What output lines cost a writer: batches of progress reports with and without `output`.

Starts one release daemon (pinned to CPU 0, this client on CPU 1) with a fresh database,
registers `--tasks` tasks, then sends `POST /v1/progress` batches that report every task
once, in turns: items without output, items with `--lines` lines of about 80 characters
each (the tail exists after the first turn, so each item reads it, appends and trims). The
daemon's time per item is what differs; the client's JSON work is the same size for both
up to the lines themselves.

    bench/output-cost.py [--tasks 1000] [--rounds 20] [--lines 5]
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
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("HEADWAYD", os.path.join(ROOT, ".build/release/headwayd"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--lines", type=int, default=5)
    args = parser.parse_args()
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {1})
    with tempfile.TemporaryDirectory() as work:
        port = free_port()
        pin = ["taskset", "-c", "0"] if (os.cpu_count() or 1) >= 2 else []
        daemon = subprocess.Popen([*pin, BINARY, "--listen", f"127.0.0.1:{port}", "--db", os.path.join(work, "o.db"),
                                   "--log-level", "warn"])
        try:
            for _ in range(400):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.025)
            connection = http.client.HTTPConnection("127.0.0.1", port)

            def post(path, body):
                connection.request("POST", path, body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                data = response.read()
                assert response.status in (200, 201), data
                return data

            for index in range(args.tasks):
                post("/v1/tasks", json.dumps({"id": f"out-{index}", "name": f"Output {index}"}))
            times = {"without output": [], "with output": []}
            for round_number in range(args.rounds):
                for kind in times:
                    items = []
                    for index in range(args.tasks):
                        item = {"task_id": f"out-{index}", "increment": 1}
                        if kind == "with output":
                            item["output"] = [f"round {round_number} line {n}: copied /srv/photos/2026/12/IMG_{index:05d}.jpg"
                                              .ljust(80, ".") for n in range(args.lines)]
                        items.append(item)
                    body = json.dumps({"updates": items})
                    started = time.perf_counter()
                    post("/v1/progress", body)
                    times[kind].append(time.perf_counter() - started)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
    print(f"POST /v1/progress, {args.tasks} items a batch, {args.rounds} batches each, "
          f"{args.lines} lines of 80 characters an item with output")
    print("| items | batch p50 | µs per item |")
    print("|---|---|---|")
    for kind, values in times.items():
        p50 = statistics.median(values)
        print(f"| {kind} | {p50 * 1000:.1f} ms | {p50 * 1e6 / args.tasks:.1f} |")
    ratio = statistics.median(times["with output"]) / statistics.median(times["without output"])
    print(f"with output / without: {ratio:.2f}")


if __name__ == "__main__":
    main()
