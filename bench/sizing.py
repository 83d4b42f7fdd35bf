#!/usr/bin/env python3
"""Bytes on disk per task and per history point, measured on a real database.

Starts the release daemon on a fresh database, registers `--tasks` tasks through the API
(a name, a label and a unit of ordinary length, a total), sends each `--points` progress
updates one second apart (history keeps at most one point per task and second), finishes
them, stops the daemon cleanly, then reads the space each table and index takes with the
`sqlite3` shell's `dbstat` table.

    bench/sizing.py [--tasks 2000] [--points 6]
"""
import argparse
import http.client
import json
import os
import subprocess
import tempfile
import time
from urllib.parse import urlsplit

from daemon_load import start_daemon, stop_daemon

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("HEADWAYD", os.path.join(ROOT, ".build/release/headwayd"))


def post(connection, path, body):
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    reply = connection.getresponse()
    reply.read()
    if reply.status not in (200, 201):
        raise SystemExit(f"POST {path}: {reply.status}")


def space(db):
    """Bytes per table or index, with its indexes' names folded into their table's."""
    output = subprocess.run(["sqlite3", db, "SELECT name, sum(pgsize) FROM dbstat GROUP BY name"],
                            check=True, capture_output=True, text=True).stdout
    return {name: int(size) for name, size in (line.split("|") for line in output.splitlines())}


def rows(db, table):
    return int(subprocess.run(["sqlite3", db, f"SELECT count(*) FROM {table}"],
                              check=True, capture_output=True, text=True).stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--points", type=int, default=6)
    arguments = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="headway-sizing-")
    db = os.path.join(directory, "headway.db")
    daemon, base = start_daemon(BINARY, db, flags=["--log-level", "warn", "--durability", "normal"])
    try:
        connection = http.client.HTTPConnection(urlsplit(base).netloc, timeout=30)
        for index in range(arguments.tasks):
            post(connection, "/v1/tasks", {"id": f"build-{index:06d}-shard", "name": f"Nightly build of service {index}",
                                           "label": "Compiling sources", "total": 1200, "unit": "files"})
        for point in range(1, arguments.points + 1):
            began = time.monotonic()
            for index in range(arguments.tasks):
                post(connection, f"/v1/tasks/build-{index:06d}-shard/progress", {"completed": point * 100})
            time.sleep(max(0.0, 1.05 - (time.monotonic() - began)))
        for index in range(arguments.tasks):
            post(connection, f"/v1/tasks/build-{index:06d}-shard/finish", {"outcome": "succeeded"})
    finally:
        stop_daemon(daemon)
    sizes = space(db)
    tasks, points = rows(db, "tasks"), rows(db, "history")
    task_bytes = sum(size for name, size in sizes.items() if name == "tasks" or name.startswith("tasks_")
                     or name.startswith("sqlite_autoindex_tasks"))
    history_bytes = sum(size for name, size in sizes.items() if name == "history" or name.startswith("history_"))
    print(f"{tasks} tasks, {points} history points; database file {os.path.getsize(db):,} bytes")
    print("| table or index | bytes |")
    print("|---|---|")
    for name, size in sorted(sizes.items(), key=lambda item: -item[1]):
        print(f"| {name} | {size:,} |")
    print(f"bytes per task (the row and its indexes): {task_bytes / tasks:,.0f}")
    print(f"bytes per history point: {history_bytes / max(1, points):,.0f}")


if __name__ == "__main__":
    main()
