#!/usr/bin/env python3
"""Backups of a large database while runners write without pause: which ones finish.

Makes a database with headwayd, adds BALLAST_MB megabytes of ballast (a table of 1 MB
blobs) with the `sqlite3` shell while the daemon is stopped, starts the daemon again and
RUNNERS threads report progress without pause. Then, one after the other, it takes three
backups, each given at most TIMEOUT seconds: the shell's `.backup`, the shell's `VACUUM
INTO`, and `headway db backup`. For each it prints whether it finished, how long it took,
the updates acknowledged meanwhile and the failed writes.

    bench/backup-under-load.py [--binary .build/release/headwayd] [--cli .build/release/headway]
                               [--ballast-mb 200] [--runners 4] [--timeout 60]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from daemon_load import ProgressLoad, start_daemon, stop_daemon


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/release/headwayd")
    parser.add_argument("--cli", default=".build/release/headway")
    parser.add_argument("--ballast-mb", type=int, default=200)
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=60)
    options = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="headway-backup-")
    database = os.path.join(directory, "headway.db")
    log = open(os.path.join(directory, "headwayd.log"), "w")
    daemon, _ = start_daemon(options.binary, database, log)
    stop_daemon(daemon)
    subprocess.run(["sqlite3", database,
                    "CREATE TABLE ballast(b BLOB); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                    f"WHERE i < {options.ballast_mb}) INSERT INTO ballast SELECT randomblob(1000000) FROM n;"],
                   check=True)
    daemon, base = start_daemon(options.binary, database, log)
    load = ProgressLoad(base, options.runners)
    load.start()
    time.sleep(2)

    backups = [
        ("sqlite3 DB '.backup COPY'", lambda copy: ["sqlite3", database, f".backup '{copy}'"]),
        ("sqlite3 DB \"VACUUM INTO 'COPY'\"", lambda copy: ["sqlite3", database, f"VACUUM INTO '{copy}'"]),
        ("headway db backup COPY", lambda copy: [options.cli, "db", "backup", "--db", database, copy]),
    ]
    print(f"database {os.path.getsize(database) / (1 << 20):.0f} MiB, {options.runners} runners writing")
    print(f"{'backup':<34} {'outcome':<22} {'seconds':>7}  {'updates meanwhile':>17}  {'failed writes':>13}")
    for index, (name, command) in enumerate(backups):
        copy = os.path.join(directory, f"copy-{index}.db")
        with load.lock:
            updates_before = load.updates
        started = time.monotonic()
        try:
            result = subprocess.run(command(copy), capture_output=True, text=True, timeout=options.timeout)
            outcome = "finished" if result.returncode == 0 else f"exit {result.returncode}"
        except subprocess.TimeoutExpired:
            outcome = f"not done in {options.timeout:.0f} s"
        seconds = time.monotonic() - started
        with load.lock:
            updates, failed = load.updates - updates_before, len(load.failures)
        print(f"{name:<34} {outcome:<22} {seconds:>7.1f}  {updates:>17,}  {failed:>13}", flush=True)
    load.stop()
    stop_daemon(daemon)
    log.close()
    return 1 if load.failures else 0


if __name__ == "__main__":
    sys.exit(main())
