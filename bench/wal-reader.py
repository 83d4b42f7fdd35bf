#!/usr/bin/env python3
"""The WAL's size under sustained load while an outside reader holds a snapshot, and after.

Starts headwayd on a fresh database; RUNNERS threads register tasks and report progress
on them (a 300-byte label) without pause. After WARMUP seconds a real `sqlite3` shell
runs `BEGIN; SELECT count(*) FROM tasks;` and keeps that read transaction open for HOLD
seconds, then commits and quits; the load goes on AFTER seconds more. Every second it
prints the time, the `-wal` file's size, the updates acknowledged in that second and the
failed writes so far; then the WAL's peak before, while and after the reader held, how
long after the reader let go the WAL was back under the daemon's `--wal-size-limit`, its
peak from then on, and its size at the end.

    bench/wal-reader.py [--binary .build/release/headwayd] [--runners 8] [--warmup 5]
                        [--hold 60] [--after 30] [--wal-size-limit BYTES]
                        [--stop-load-at-release] [-- extra headwayd flags]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from daemon_load import ProgressLoad, start_daemon, stop_daemon


def wal_bytes(database):
    try:
        return os.path.getsize(database + "-wal")
    except FileNotFoundError:
        return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/release/headwayd")
    parser.add_argument("--runners", type=int, default=8)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--hold", type=float, default=60, help="seconds the reader holds its snapshot")
    parser.add_argument("--after", type=float, default=30, help="seconds of load after the reader let go")
    parser.add_argument("--wal-size-limit", type=int,
                        help="passed to the daemon as --wal-size-limit (default: not passed; 32 MiB is reported)")
    parser.add_argument("--stop-load-at-release", action="store_true",
                        help="stop the runners when the reader lets go (no write comes after)")
    parser.add_argument("extra", nargs="*", help="extra headwayd flags (after --)")
    options = parser.parse_args()
    limit_flags = [] if options.wal_size_limit is None else ["--wal-size-limit", str(options.wal_size_limit)]
    options.wal_size_limit = options.wal_size_limit or 32 << 20

    directory = tempfile.mkdtemp(prefix="headway-wal-")
    database = os.path.join(directory, "headway.db")
    log = open(os.path.join(directory, "headwayd.log"), "w")
    daemon, base = start_daemon(options.binary, database, log, [*limit_flags, *options.extra])
    load = ProgressLoad(base, options.runners, label_bytes=300)
    load.start()

    print(f"{'time s':>6}  {'phase':<8} {'WAL bytes':>12}  {'updates/s':>9}  {'failed':>6}")
    start = time.monotonic()
    shell = None
    phase = "warmup"
    peaks = {"warmup": 0, "held": 0, "released": 0, "back under the limit": 0}
    released_at = None
    back_under_after = None
    last_updates = 0
    last_time = start
    end = options.warmup + options.hold + options.after
    while True:
        elapsed = time.monotonic() - start
        if phase == "warmup" and elapsed >= options.warmup:
            shell = subprocess.Popen(["sqlite3", database], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            shell.stdin.write("BEGIN; SELECT count(*) FROM tasks;\n")
            shell.stdin.flush()
            shell.stdout.readline()
            phase = "held"
        elif phase == "held" and elapsed >= options.warmup + options.hold:
            shell.stdin.write("COMMIT;\n.quit\n")
            shell.stdin.flush()
            shell.wait(timeout=30)
            phase = "released"
            released_at = time.monotonic()
            if options.stop_load_at_release:
                load.stopping.set()
        elif elapsed >= end:
            break
        time.sleep(1 - (time.monotonic() - start) % 1)
        now = time.monotonic()
        with load.lock:
            updates, failed = load.updates, len(load.failures)
        size = wal_bytes(database)
        peaks[phase] = max(peaks[phase], size)
        if phase == "released" and back_under_after is None and size <= options.wal_size_limit:
            back_under_after = now - released_at
        if back_under_after is not None:
            peaks["back under the limit"] = max(peaks["back under the limit"], size)
        rate = (updates - last_updates) / (now - last_time)
        print(f"{now - start:6.0f}  {phase:<8} {size:>12,}  {rate:>9,.0f}  {failed:>6}", flush=True)
        last_updates, last_time = updates, now

    final = wal_bytes(database)
    load.stop()
    stop_daemon(daemon)
    log.close()
    mib = 1 << 20
    print()
    print(f"runners {options.runners}, reader held {options.hold:.0f} s after {options.warmup:.0f} s of load, "
          f"then {options.after:.0f} s more" + (" without load" if options.stop_load_at_release else ""))
    print(f"WAL peak before the reader:      {peaks['warmup'] / mib:8.1f} MiB")
    print(f"WAL peak while the reader held:  {peaks['held'] / mib:8.1f} MiB")
    print(f"WAL peak after it let go:        {peaks['released'] / mib:8.1f} MiB")
    if back_under_after is None:
        print(f"WAL never back under the limit ({options.wal_size_limit / mib:.0f} MiB) after the reader let go")
    else:
        print(f"WAL back under the limit ({options.wal_size_limit / mib:.0f} MiB) at the first sample "
              f"{back_under_after:.1f} s after the reader let go; peak from then on: "
              f"{peaks['back under the limit'] / mib:.1f} MiB")
    print(f"WAL at the end:                  {final / mib:8.1f} MiB"
          + (" (no load since the reader let go)" if options.stop_load_at_release else " (load still on)"))
    print(f"updates acknowledged: {load.updates:,}; failed writes: {len(load.failures)}"
          + (f" (first: {load.failures[0]})" if load.failures else ""))
    return 1 if load.failures else 0


if __name__ == "__main__":
    sys.exit(main())
