#!/usr/bin/env python3
"""The Python client's cost to the loop it measures, and what it sends.

1. Time per `update()` of plain `tqdm.tqdm` beside `headway.tqdm` (drawing to /dev/null,
   and with `disable=True`), per iteration of a bare loop, plain tqdm, `headway.tqdm` and
   `headway.track`, and per `headway.Task.update()`, each the median of several runs,
   while the reporter sends to a live daemon. The goal: at most 1 µs added per `update()`.
2. Requests a tight loop makes: batch items and requests per second while one
   `track` loop (then 100 tasks at once) runs for a few seconds.

Starts its own headwayd (HEADWAYD, default .build/release/headwayd) on a free loopback
port with a fresh database. `--write-doc` writes the section "Python client" of
docs/benchmarks.md. Needs tqdm and the `headway` package in this interpreter
(`make bench` installs both)."""
import argparse
import contextlib
import itertools
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "## Python client"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def daemon_binary():
    return os.environ.get("HEADWAYD", os.path.join(ROOT, ".build/release/headwayd"))


@contextlib.contextmanager
def daemon():
    binary = daemon_binary()
    with tempfile.TemporaryDirectory() as folder:
        port = free_port()
        process = subprocess.Popen([binary, "--listen", f"127.0.0.1:{port}", "--db", os.path.join(folder, "h.db")],
                                   stderr=subprocess.DEVNULL)
        try:
            for _ in range(500):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.02)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=20)


def per_call(run, count, repeat):
    """Median nanoseconds per call of `run(count)` over `repeat` runs."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter_ns()
        run(count)
        samples.append((time.perf_counter_ns() - started) / count)
    return statistics.median(samples)


def measure_overhead(count, repeat):
    import tqdm as tqdm_module

    import headway

    devnull = open(os.devnull, "w")

    def updates(cls, **options):
        def run(n):
            bar = cls(total=n, file=devnull, **options)
            update = bar.update
            for _ in range(n):
                update()
            bar.close()
        return run

    def iterations(make):
        def run(n):
            for _ in make(range(n)):
                pass
        return run

    def task_updates(n):
        task = headway.Task("bench Task.update", total=n)
        update = task.update
        for _ in range(n):
            update()
        task.finish()

    rows = {
        "update(): tqdm": updates(tqdm_module.tqdm),
        "update(): headway.tqdm": updates(headway.tqdm),
        "update(), disable=True: tqdm": updates(tqdm_module.tqdm, disable=True),
        "update(), disable=True: headway.tqdm": updates(headway.tqdm, disable=True),
        "update(): headway.Task": task_updates,
        "iteration: bare loop": iterations(lambda items: items),
        "iteration: tqdm": iterations(lambda items: tqdm_module.tqdm(items, file=devnull)),
        "iteration: headway.tqdm": iterations(lambda items: headway.tqdm(items, file=devnull)),
        "iteration: headway.track": iterations(lambda items: headway.track(items, "bench track")),
    }
    # Interleaved rounds, so that a slower moment of the machine touches every row alike.
    samples = {name: [] for name in rows}
    for _ in range(repeat):
        for name, run in rows.items():
            samples[name].append(per_call(run, count, 1))
    headway.flush(30)
    return {name: statistics.median(values) for name, values in samples.items()}


def measure_sending(seconds):
    import headway
    from headway import _reporter

    reporter = _reporter.shared_reporter()
    headway.flush(30)
    before = dict(reporter.sent)
    started = time.monotonic()
    iterations = 0
    for _ in headway.track(itertools.count(), "tight loop"):
        iterations += 1
        if iterations % 4096 == 0 and time.monotonic() - started >= seconds:
            break
    elapsed = time.monotonic() - started
    one = {key: reporter.sent[key] - before[key] for key in before}

    tasks = [headway.Task(f"shard {i}") for i in range(100)]
    headway.flush(30)
    before = dict(reporter.sent)
    started = time.monotonic()
    rounds = 0
    while time.monotonic() - started < seconds:
        for task in tasks:
            task.update()
        rounds += 1
    many_elapsed = time.monotonic() - started
    many = {key: reporter.sent[key] - before[key] for key in before}
    for task in tasks:
        task.finish()
    headway.flush(30)
    return {
        "one_loop": {"seconds": round(elapsed, 2), "iterations": iterations,
                     "iterations_per_second": round(iterations / elapsed),
                     "batches_per_second": round(one["batch"] / elapsed, 2),
                     "items_per_second": round(one["items"] / elapsed, 2)},
        "hundred_tasks": {"seconds": round(many_elapsed, 2), "updates": rounds * 100,
                          "batches_per_second": round(many["batch"] / many_elapsed, 2),
                          "items_per_second": round(many["items"] / many_elapsed, 2)},
    }


def section(figures, args):
    overhead = figures["overhead"]
    rows = []
    for name, nanoseconds in overhead.items():
        base = None
        if name.startswith("update(): headway.tqdm"):
            base = overhead["update(): tqdm"]
        elif name == "update(), disable=True: headway.tqdm":
            base = overhead["update(), disable=True: tqdm"]
        elif name in ("iteration: headway.tqdm",):
            base = overhead["iteration: tqdm"]
        elif name == "iteration: headway.track":
            base = overhead["iteration: bare loop"]
        added = f"+{(nanoseconds - base) / 1000:.3f} µs" if base is not None else ""
        rows.append(f"| {name} | {nanoseconds / 1000:.3f} µs | {added} |")
    sending = figures["sending"]
    one, many = sending["one_loop"], sending["hundred_tasks"]
    return f"""{SECTION}

What `clients/python` costs the loop it measures, from `bench/python-client.py` (`make
bench` runs it; `make bench-python` alone) on {figures['date']}, commit {figures['commit']},
Python {figures['python']}, tqdm {figures['tqdm']}, {figures['cpus']} cores, {figures['machine']}
(load average {figures['load_average']} at the end: the machine was shared);
median of {args.repeat} interleaved runs of {args.count:,} calls each, the reporter
sending to a live headwayd (`{figures['daemon']}`) on loopback the whole time. "Added" is against the
row it replaces (plain tqdm; for `track`, the bare loop).

| per call | time | added |
|---|---|---|
{chr(10).join(rows)}

Why it is cheap: `update()` only counts (and checks one flag for a cancel); the
reporter's thread reads the bar's `n` four times a second and sends the difference.
Iterating a drawing `headway.tqdm` costs what tqdm's own loop costs plus one generator
step, which tells a `break` from the end of the iterable. With `disable=True` tqdm
itself does nothing at all per call, so the whole cost there is the count Headway keeps.

Requests a tight loop makes (`track` over `itertools.count()` for {one['seconds']} s,
{one['iterations_per_second']:,} iterations/s): {one['batches_per_second']} batch
requests/s carrying {one['items_per_second']} items/s, however fast the loop. 100 tasks
updated round-robin for {many['seconds']} s ({many['updates']:,} `update()` calls):
{many['batches_per_second']} batch requests/s carrying {many['items_per_second']} items/s
(each request holds every task that moved).

```sh
make bench-python                  # or: .build/venv/bin/python3 bench/python-client.py --write-doc
```

Raw figures: `{json.dumps(figures, separators=(",", ":"))}`
"""


def write_section(text):
    path = os.path.join(ROOT, "docs/benchmarks.md")
    document = open(path).read() if os.path.exists(path) else ""
    start = document.find("\n" + SECTION + "\n")
    if start < 0:
        document = document.rstrip("\n") + "\n\n" + text
    else:
        end = document.find("\n## ", start + 1)
        document = document[:start + 1] + text + (document[end:] if end >= 0 else "")
    with open(path, "w") as doc:
        doc.write(document)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1_000_000, help="calls per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per row; the table shows medians")
    parser.add_argument("--seconds", type=float, default=5.0, help="each sending run")
    parser.add_argument("--write-doc", action="store_true", help="write the section into docs/benchmarks.md")
    args = parser.parse_args()
    import tqdm

    with daemon() as base:
        os.environ["HEADWAY_URL"] = base
        overhead = measure_overhead(args.count, args.repeat)
        sending = measure_sending(args.seconds)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    figures = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit,
               "python": platform.python_version(), "tqdm": tqdm.__version__, "cpus": os.cpu_count(),
               "machine": f"{platform.machine()}, Linux {platform.release()}",
               "load_average": round(os.getloadavg()[0], 1),
               "daemon": os.path.relpath(daemon_binary(), ROOT),
               "overhead": {name: round(value, 1) for name, value in overhead.items()}, "sending": sending}
    for name, value in overhead.items():
        print(f"{name:42} {value / 1000:8.3f} µs")
    print(json.dumps(sending, indent=1))
    if args.write_doc:
        write_section(section(figures, args))
        print("written: docs/benchmarks.md, section " + SECTION[3:])


if __name__ == "__main__":
    sys.exit(main())
