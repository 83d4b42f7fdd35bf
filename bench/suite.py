#!/usr/bin/env python3
"""headwayd beside nginx+nchan, measured alternately in one run; writes docs/benchmarks.md.

Each server is pinned to CPU 0, the load (wrk, the epoll subscriber client) to CPU 1.
Throughput runs alternate nchan / headwayd (full) / headwayd (normal) for --repeat rounds
and report medians; fan-out runs alternate nchan / headwayd; the order turns each round.
Prints one table of figures and ratios against the targets it was built for, writes
it to docs/benchmarks.md with a plot of latency percentiles (docs/benchmarks-latency.png),
then runs bench/postgres-scaling.py (SQLite, PostgreSQL, two daemons on one PostgreSQL
database), which prints its tables and writes its own section of docs/benchmarks.md.

    bench/suite.py [--repeat 3] [--seconds 10] [--subscribers 10000] [--fanout-seconds 30] [--quick]
"""
import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402

ROOT = servers.ROOT


def run_script(arguments):
    """Runs another benchmark script; returns its output."""
    return subprocess.run([sys.executable, *arguments], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--subscribers", type=int, default=10_000)
    parser.add_argument("--fanout-seconds", type=float, default=30)
    parser.add_argument("--fanout-repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="short runs, to check the suite itself")
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.seconds, args.subscribers, args.fanout_seconds, args.fanout_repeat = 1, 3, 1000, 5, 1
    servers.pin_this_process_to_cpu1()
    log = lambda text: print(text, file=sys.stderr, flush=True)

    # 1, 2: publishes per second, alternating; the order turns each round, so no server
    # always runs first on a quiet machine or right after another's connections closed.
    rates = {"nchan": [], "full": [], "normal": []}
    latency_rows = []
    contenders = [("nchan", servers.Nchan), ("full", lambda: servers.Headway("full")),
                  ("normal", lambda: servers.Headway("normal"))]
    for round_ in range(args.repeat):
        for key, make in contenders[round_ % 3:] + contenders[:round_ % 3]:
            server = make()
            try:
                rate, p50, p99, errors = servers.wrk_publish(server, connections=50, seconds=args.seconds)
            finally:
                server.stop()
            assert errors == 0, f"{key}: {errors} errors"
            rates[key].append(rate)
            latency_rows.append((f"publish {key}", p50, p99))
            log(f"round {round_ + 1} {key}: {rate:.0f}/s (p50 {p50} ms, p99 {p99} ms)")
    median = {key: statistics.median(values) for key, values in rates.items()}

    # 3, 4, 5: fan-out to N subscribers, alternating, the order swapped each round.
    fan = {"nchan": [], "headway": []}
    pair = [("nchan", servers.Nchan), ("headway", lambda: servers.Headway("full"))]
    for round_ in range(args.fanout_repeat):
        for key, make in pair if round_ % 2 == 0 else pair[::-1]:
            server = make()
            try:
                result = servers.fanout(server, subscribers=args.subscribers, rate=5, seconds=args.fanout_seconds)
            finally:
                server.stop()
            fan[key].append(result)
            log(f"fan-out round {round_ + 1} {key}: {result}")

    def fan_median(key, field):
        return statistics.median(r[field] for r in fan[key])

    delivered = sum(r["delivered"] for r in fan["headway"]) / max(1, sum(r["expected"] for r in fan["headway"]))
    nchan_delivered = sum(r["delivered"] for r in fan["nchan"]) / max(1, sum(r["expected"] for r in fan["nchan"]))

    # 6: updates per second while N subscribers receive.
    server = servers.Headway("full")
    try:
        busy_rate, busy_connected, busy_events = servers.publish_while_subscribed(
            server, subscribers=args.subscribers, seconds=args.seconds)
    finally:
        server.stop()
    log(f"updates while {busy_connected} subscribers receive: {busy_rate:.0f}/s ({busy_events:.1f} events/s each)")

    # 7: page latency at 1,000,000 vs 1,000 tasks; 8: stall flag lateness with 100,000 running tasks.
    sizes = "1000,100000" if args.quick else "1000,1000000"
    pages = run_script(["bench/list-latency.py", "--sizes", sizes, "--requests", "100" if args.quick else "300"])
    page_ratio = float(re.search(r"\| `/v1/tasks` \|.*\| ([0-9.]+) \|", pages).group(1))
    stall_tasks = 20_000 if args.quick else 100_000
    stall = run_script(["bench/stall-sweeper.py", "--tasks", str(stall_tasks),
                        "--idle", "3" if args.quick else "10", "--spread", "10" if args.quick else "30"])
    stall_p99 = float(re.search(r"p99 (\d+) ms", stall).group(1))
    log(pages + stall)

    rows = [
        ("1", "progress updates/s, 50 connections, `--durability full`", f"{median['full']:,.0f}/s",
         f"{median['nchan']:,.0f}/s", median["full"] / median["nchan"], "≥ 0.5 ×", median["full"] / median["nchan"] >= 0.5),
        ("2", "same with `--durability normal`", f"{median['normal']:,.0f}/s", f"{median['nchan']:,.0f}/s",
         median["normal"] / median["nchan"], "≥ 0.7 ×", median["normal"] / median["nchan"] >= 0.7),
        ("3", f"{args.subscribers:,} SSE subscribers, 5 changes/s, {args.fanout_seconds:.0f} s: delivered / expected",
         f"{100 * delivered:.2f}%", f"{100 * nchan_delivered:.2f}%", None, "100%", delivered >= 1.0),
        ("4a", "same: publish-to-receive latency p50", f"{fan_median('headway', 'p50_ms'):.1f} ms",
         f"{fan_median('nchan', 'p50_ms'):.1f} ms", fan_median("headway", "p50_ms") / fan_median("nchan", "p50_ms"),
         "≤ 1.0 ×", fan_median("headway", "p50_ms") <= fan_median("nchan", "p50_ms")),
        ("4b", "same: publish-to-receive latency p99", f"{fan_median('headway', 'p99_ms'):.1f} ms",
         f"{fan_median('nchan', 'p99_ms'):.1f} ms", fan_median("headway", "p99_ms") / fan_median("nchan", "p99_ms"),
         "≤ 1.0 ×", fan_median("headway", "p99_ms") <= fan_median("nchan", "p99_ms")),
        ("5", "server RSS per subscriber", f"{fan_median('headway', 'rss_per_subscriber_kib'):.1f} KiB",
         f"{fan_median('nchan', 'rss_per_subscriber_kib'):.1f} KiB",
         fan_median("headway", "rss_per_subscriber_kib") / fan_median("nchan", "rss_per_subscriber_kib"), "≤ 1.0 ×",
         fan_median("headway", "rss_per_subscriber_kib") <= fan_median("nchan", "rss_per_subscriber_kib")),
        ("6", f"updates/s while {busy_connected:,} subscribers of every task receive (each got "
              f"{busy_events:.0f} events/s, coalesced)", f"{busy_rate:,.0f}/s",
         f"figure 1: {median['full']:,.0f}/s", busy_rate / median["full"], "≥ 0.7 × figure 1",
         busy_rate / median["full"] >= 0.7),
        ("7", f"`GET /v1/tasks` page latency, {int(sizes.split(',')[1]):,} vs 1,000 tasks", f"{page_ratio:.2f} ×", "—",
         page_ratio, "≤ 2 ×", page_ratio <= 2),
        ("8", f"stall flag lateness with {stall_tasks:,} running tasks, p99", f"{stall_p99:.0f} ms", "—", None, "≤ 1 s",
         stall_p99 <= 1000),
    ]
    table = ["| # | figure | headwayd | nginx+nchan | ratio | target | met |", "|---|---|---|---|---|---|---|"]
    for number, figure, ours, theirs, ratio, target, met in rows:
        table.append(f"| {number} | {figure} | {ours} | {theirs} | {'' if ratio is None else f'{ratio:.2f}'} "
                     f"| {target} | {'yes' if met else '**no**'} |")
    print("\n".join(table))

    # The plot: publish-to-receive latency percentiles of both servers.
    plot = os.path.join(ROOT, "docs/benchmarks-latency.png")
    os.makedirs(os.path.dirname(plot), exist_ok=True)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
        labels = ["p50", "p90", "p99"]
        figure, axis = pyplot.subplots(figsize=(7, 4))
        for offset, key, name in [(-0.2, "headway", "headwayd"), (0.2, "nchan", "nginx+nchan")]:
            values = [fan_median(key, f"{label}_ms") for label in labels]
            axis.bar([i + offset for i in range(3)], values, width=0.4, label=name)
        axis.set_xticks(range(3), labels)
        axis.set_ylabel("publish → receive (ms)")
        axis.set_title(f"{args.subscribers:,} SSE subscribers, 5 updates/s (medians of {args.fanout_repeat} runs)")
        axis.legend()
        figure.tight_layout()
        figure.savefig(plot, dpi=110)
    except ImportError:
        plot = None

    machine = f"{os.cpu_count()} cores, {platform.machine()}, Linux {platform.release()}"
    # Sections written by other benchmarks (`## …`, e.g. bench/tls-fanout.py's) are kept.
    path = os.path.join(ROOT, "docs/benchmarks.md")
    previous = open(path).read() if os.path.exists(path) else ""
    kept = previous[previous.find("\n## "):] if "\n## " in previous else ""
    with open(path, "w") as doc:
        doc.write(f"""# Benchmarks: headwayd beside nginx + nchan

Written by `make bench` (`bench/suite.py{' --quick' if args.quick else ''}`) on
{datetime.date.today().isoformat()}, {machine}. Each server ran alone, pinned to CPU 0, with
the load on CPU 1; throughput rounds alternate nchan / headwayd full / headwayd normal
({args.repeat} rounds, medians of {args.seconds} s wrk runs, 50 keep-alive connections, the
same ~100-byte JSON body); fan-out rounds alternate nchan / headwayd ({args.fanout_repeat}
rounds, {args.subscribers:,} EventSource subscribers of one channel/task read by one epoll
client, 5 stamped updates/s for {args.fanout_seconds:.0f} s); the order of the servers turns
each round. Figure 6: {args.subscribers:,} subscribers of every task, each with its snapshot,
then wrk updating 50 tasks for {args.seconds} s. nchan keeps messages in shared memory;
every headwayd 2xx is a committed SQLite transaction.

{chr(10).join(table)}

![publish-to-receive latency](benchmarks-latency.png)

Raw figures: publishes/s per round {rates}; fan-out results {fan}.
""" + kept)
    print(f"written: docs/benchmarks.md{' and ' + plot if plot else ''}")

    # One daemon on SQLite, one on PostgreSQL, two sharing a PostgreSQL database: its own
    # section of docs/benchmarks.md, written by the script.
    short = ["--repeat", "1", "--seconds", "3", "--fanout-seconds", "3", "--subscribers", "200"] if args.quick else []
    print(run_script(["bench/postgres-scaling.py", "--write-doc", *short]), end="")


if __name__ == "__main__":
    main()
