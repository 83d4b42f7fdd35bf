#!/usr/bin/env python3
"""headwayd beside nginx+nchan and Redis, measured alternately in one run; writes docs/benchmarks.md.

Each server is pinned to CPU 0, the load (wrk, the event-stream subscribers of
bench/sse-subscribers.c, the Redis client bench/redis-progress.c) to CPU 1. Throughput
runs alternate nchan / headwayd (full) / headwayd (normal) / Redis (appendfsync always) /
Redis (appendfsync everysec) for --repeat rounds and report medians; Redis runs BullMQ's own updateProgress script (from
the bullmq package) on jobs BullMQ's Queue.add created. Fan-out runs alternate nchan /
headwayd; the order turns each round. Prints one table of figures and ratios against the
targets it was built for, writes it to docs/benchmarks.md with a plot of latency
percentiles (docs/benchmarks-latency.png) and the Redis comparison's own section, then
runs bench/postgres-scaling.py (SQLite, PostgreSQL, two daemons on one PostgreSQL
database), which prints its tables and writes its own section of docs/benchmarks.md.

Figure 3r sends the updates in batches of 200 (`POST /v1/progress`) beside Redis' single
calls; figures 4c and 4d repeat the fan-out with fewer subscribers (--small-subscribers).

--redis-only (`make bench-redis`) runs the throughput rounds of headwayd (single updates,
then batches) and Redis alone, prints their rows and writes only the Redis section.
--streams-only (`make bench-streams`, with --subscribers 50000) runs the fan-out rounds of
figures 3 to 5 alone, prints their rows and writes only their section.

    bench/suite.py [--repeat 5] [--seconds 10] [--subscribers 10000] [--small-subscribers 1000]
                   [--fanout-seconds 30] [--quick] [--redis-only] [--streams-only]
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


def wrk_contender(make):
    """A contender measured by wrk: `make` starts its server."""
    return lambda: (make(), servers.wrk_publish)


# The throughput contenders: each key with what starts its server and returns it with the
# function that measures it.
CONTENDERS = [
    ("nchan", wrk_contender(servers.Nchan)),
    ("full", wrk_contender(lambda: servers.Headway("full"))),
    ("normal", wrk_contender(lambda: servers.Headway("normal"))),
    ("full batched", lambda: (servers.Headway("full"), servers.wrk_publish_batches)),
    ("redis always", lambda: (servers.Redis("always"), servers.redis_progress)),
    ("redis everysec", lambda: (servers.Redis("everysec"), servers.redis_progress)),
]

REDIS_SECTION = "## Beside Redis: BullMQ's progress call"
# Items a request in figure 3r: a build agent reporting its 200 test shards at once.
BATCH_ITEMS = 200


def throughput_rounds(keys, repeat, seconds, log):
    """Updates per second of each contender named in `keys`, `repeat` rounds of `seconds`,
    50 connections; the order turns each round, so no server always runs first on a quiet
    machine or right after another's connections closed. Returns ({key: [rate per round]},
    [(label, p50 ms, p99 ms) per run], {key: [server CPU µs per update per round]}); the CPU
    is the server process's over the whole measurement, setup included (a few ms)."""
    contenders = [(key, start) for key, start in CONTENDERS if key in keys]
    rates = {key: [] for key, _ in contenders}
    cpu_per_update = {key: [] for key, _ in contenders}
    latency_rows = []
    for round_ in range(repeat):
        turn = round_ % len(contenders)
        for key, start in contenders[turn:] + contenders[:turn]:
            server, measure = start()
            try:
                cpu_before = servers.cpu_seconds(server.pid)
                rate, p50, p99, errors = measure(server, connections=50, seconds=seconds)
                cpu_per_update[key].append(1e6 * (servers.cpu_seconds(server.pid) - cpu_before) / (rate * seconds))
            finally:
                server.stop()
            assert errors == 0, f"{key}: {errors} errors"
            rates[key].append(rate)
            latency_rows.append((f"publish {key}", p50, p99))
            log(f"round {round_ + 1} {key}: {rate:.0f}/s (p50 {p50} ms, p99 {p99} ms, "
                f"{cpu_per_update[key][-1]:.1f} µs of CPU 0 per update)")
    return rates, latency_rows, cpu_per_update


def redis_rows(median):
    """The table rows of headwayd against Redis running BullMQ's updateProgress script."""
    return [
        ("1r", "progress updates/s, 50 connections, `--durability full` beside Redis `appendfsync always`",
         f"{median['full']:,.0f}/s", f"Redis: {median['redis always']:,.0f}/s",
         median["full"] / median["redis always"], "≥ 1.0 ×", median["full"] / median["redis always"] >= 1.0),
        ("2r", "same, `--durability normal` beside Redis `appendfsync everysec`",
         f"{median['normal']:,.0f}/s", f"Redis: {median['redis everysec']:,.0f}/s",
         median["normal"] / median["redis everysec"], "≥ 0.7 ×", median["normal"] / median["redis everysec"] >= 0.7),
        ("3r", f"progress items/s sent {BATCH_ITEMS} a request (`POST /v1/progress`, {BATCH_ITEMS} tasks), `full`, "
               "beside Redis `appendfsync always` (one call an update)",
         f"{median['full batched']:,.0f}/s", f"Redis: {median['redis always']:,.0f}/s",
         median["full batched"] / median["redis always"], "≥ 5 ×", median["full batched"] / median["redis always"] >= 5),
    ]


def round_ratios(rates, ours, theirs):
    """The ratios of `ours` to `theirs` round by round, as text."""
    return " / ".join(f"{a / b:.2f}" for a, b in zip(rates[ours], rates[theirs]))


def table_lines(rows, peer="peer"):
    """A Markdown table of (number, figure, headwayd, peer, ratio, target, met) rows."""
    lines = [f"| # | figure | headwayd | {peer} | ratio | target | met |", "|---|---|---|---|---|---|---|"]
    for number, figure, ours, theirs, ratio, target, met in rows:
        lines.append(f"| {number} | {figure} | {ours} | {theirs} | {'' if ratio is None else f'{ratio:.2f}'} "
                     f"| {target} | {'yes' if met else '**no**'} |")
    return lines


def redis_section(args, median, rates, latency_rows, cpu_per_update, redis_version):
    """docs/benchmarks.md's section on Redis: how it ran, its rows, latencies, CPU, raw figures."""
    latencies = {}
    for label, p50, p99 in latency_rows:
        latencies.setdefault(label.removeprefix("publish "), []).append((p50, p99))
    latency = "; ".join(
        f"{key} {statistics.median(p for p, _ in runs):.2f} / {statistics.median(p for _, p in runs):.2f} ms"
        for key, runs in latencies.items() if key != "nchan")
    cpu = "; ".join(f"{key} {statistics.median(values):.1f} µs" for key, values in cpu_per_update.items()
                    if key != "nchan")
    cpu_rounds = "; ".join(f"{key} {' / '.join(f'{v:.1f}' for v in values)} µs" for key, values in cpu_per_update.items()
                           if key != "nchan")
    return f"""{REDIS_SECTION}

Written by `{'make bench-redis' if args.redis_only else 'make bench'}` (`bench/suite.py{' --redis-only' if args.redis_only else ''}{' --quick' if args.quick else ''}`) on
{datetime.date.today().isoformat()}, {machine()}. What a team would run instead of headwayd
for durable progress is a job queue's progress call: BullMQ's `job.updateProgress`, one Lua
script on Redis that sets the job hash's `progress` field and appends a `progress` event
to the queue's event stream (trimmed to BullMQ's default of about 10,000 entries).

Redis {redis_version} (Debian's `redis-server`) ran pinned to CPU 0 on a loopback port with a
fresh directory, an append-only file and Redis' defaults otherwise (RDB snapshots off; its
automatic rewrites of the append-only file on): with `appendfsync always` a reply survives
power loss (the file is synced before Redis answers), as a 2xx of `--durability full`
does; with `appendfsync everysec` it survives a crash of Redis, but a power loss may take
the last second or two, as with `normal`. The script is BullMQ's own
(`updateProgress-3.lua` from the `bullmq` package, loaded with `SCRIPT LOAD`), called with
`EVALSHA` on 50 jobs that BullMQ's `Queue.add` created, by `bench/redis-progress.c` on
CPU 1: 50 connections, one call in flight each, each updating its own job with a
~100-byte JSON progress like headwayd's body, for {args.seconds} s. After each run the event
stream had grown (`XINFO STREAM` entries-added) by exactly the calls acknowledged, and
each job's `progress` held its last value. headwayd ran as in figures 1 and 2 (wrk, 50
connections, 50 tasks); figure 3r's batches ran as `bench/progress-batch.sh` sends them
(`bench/progress-batch.lua`, wrk, 50 connections, {BATCH_ITEMS} items a request over {BATCH_ITEMS}
tasks), and the tasks' stored increments were checked to add up to every item acknowledged.
The rounds alternate ({args.repeat} rounds, the order turning each
round; medians). The machine's load average (1 minute) was {args.load_before:.2f} before the
rounds and {args.load_after:.2f} after them (the rounds themselves keep about 2 busy).

{chr(10).join(table_lines(redis_rows(median)))}

Round by round, each headwayd run beside the peer's run of the same round: 1r
{round_ratios(rates, "full", "redis always")}; 2r {round_ratios(rates, "normal", "redis everysec")}; 3r
{round_ratios(rates, "full batched", "redis always")}. The spread is the machine's: a shared host whose
speed moves from one 10 s run to the next (CPU per update below, round by round: {cpu_rounds}).

Latency p50 / p99 (medians of the rounds): {latency}.

CPU time of the server process per update (its threads on CPU 0, Redis' forked rewrite
children not counted; medians): {cpu}.

Raw figures: updates/s per round {rates}.
"""


def with_section(document, title, section):
    """`document` with its section `title` (up to the next `## `) replaced by `section`, or
    `section` inserted before the first other section when it has none."""
    start = document.find(f"\n{title}\n")
    if start >= 0:
        end = document.find("\n## ", start + 1)
        return document[:start + 1] + section + (document[end:] if end >= 0 else "")
    first = document.find("\n## ")
    if first < 0:
        return document.rstrip("\n") + "\n\n" + section
    return document[:first + 1] + section + "\n" + document[first + 1:]


def machine():
    """This machine, as the documents name it."""
    return f"{os.cpu_count()} cores, {platform.machine()}, Linux {platform.release()}"


def redis_only(args, log):
    """`make bench-redis`: headwayd and Redis alternately; prints the rows, writes the section."""
    rates, latency_rows, cpu_per_update = throughput_rounds(["full", "normal", "full batched", "redis always",
                                                             "redis everysec"],
                                                            args.repeat, args.seconds, log)
    args.load_after = os.getloadavg()[0]
    median = {key: statistics.median(values) for key, values in rates.items()}
    print("\n".join(table_lines(redis_rows(median))))
    write_redis_section(args, median, rates, latency_rows, cpu_per_update)


def write_redis_section(args, median, rates, latency_rows, cpu_per_update):
    """Writes (or rewrites) the Redis section of docs/benchmarks.md, keeping every other."""
    version = re.search(r"v=(\S+)", subprocess.run([servers.REDIS_SERVER, "--version"], capture_output=True,
                                                   text=True, check=True).stdout).group(1)
    path = os.path.join(ROOT, "docs/benchmarks.md")
    document = open(path).read() if os.path.exists(path) else ""
    with open(path, "w") as doc:
        doc.write(with_section(document, REDIS_SECTION, redis_section(args, median, rates, latency_rows, cpu_per_update, version)))
    print(f"written: docs/benchmarks.md, \"{REDIS_SECTION.removeprefix('## ')}\"")


def fanout_rounds(subscribers, args, log):
    """Fan-out to `subscribers` subscribers of one channel/task, nchan and headwayd (full)
    alternately, the order swapped each round: {"nchan": [result…], "headway": [result…]}."""
    fan = {"nchan": [], "headway": []}
    pair = [("nchan", servers.Nchan), ("headway", lambda: servers.Headway("full"))]
    for round_ in range(args.fanout_repeat):
        for key, make in pair if round_ % 2 == 0 else pair[::-1]:
            server = make()
            try:
                result = servers.fanout(server, subscribers=subscribers, rate=5, seconds=args.fanout_seconds)
            finally:
                server.stop()
            fan[key].append(result)
            log(f"fan-out to {subscribers:,}, round {round_ + 1} {key}: {result}")
    return fan


def fan_median(results, key, field):
    """The median of `field` over the rounds of `key` ("nchan" or "headway")."""
    return statistics.median(r[field] for r in results[key])


def delivered_share(results, key):
    """Events delivered over events expected, all rounds of `key` together."""
    return sum(r["delivered"] for r in results[key]) / max(1, sum(r["expected"] for r in results[key]))


def fanout_rows(fan, subscribers, seconds, rss_target):
    """Figures 3, 4a, 4b and 5 of fan-out rounds `fan` to `subscribers`, RSS per subscriber
    against `rss_target` (a ratio to nchan's)."""
    def ratio_row(number, figure, field, unit, target):
        ours, theirs = fan_median(fan, "headway", field), fan_median(fan, "nchan", field)
        return (number, figure, f"{ours:.1f} {unit}", f"{theirs:.1f} {unit}", ours / theirs, f"≤ {target} ×",
                ours <= target * theirs)
    delivered, nchan_delivered = delivered_share(fan, "headway"), delivered_share(fan, "nchan")
    return [
        ("3", f"{subscribers:,} SSE subscribers, 5 changes/s, {seconds:.0f} s: delivered / expected",
         f"{100 * delivered:.2f}%", f"{100 * nchan_delivered:.2f}%", None, "100%", delivered >= 1.0),
        ratio_row("4a", "same: publish-to-receive latency p50", "p50_ms", "ms", 1.0),
        ratio_row("4b", "same: publish-to-receive latency p99", "p99_ms", "ms", 1.0),
        ratio_row("5", "server RSS per subscriber", "rss_per_subscriber_kib", "KiB", rss_target),
    ]


STREAMS_SECTION = "## Tens of thousands of event streams"
# Files headwayd keeps beside its event streams (OpenFileBudget.reserve,
# Sources/Daemon/OpenFileLimit.swift): a process's open-file limit less these is the most
# subscribers one server can hold.
HEADWAY_OTHER_FILES = 1024 + 64


def streams_only(args, log):
    """`make bench-streams`: figures 3, 4a, 4b and 5 alone, at `args.subscribers` (50,000),
    nchan and headwayd alternately; prints the rows and writes their section. A process
    holds at most its open-file limit: where this one's (which both servers inherit)
    cannot hold the subscribers, both run at what it holds, and the section says so."""
    limit = servers.open_file_limit()
    subscribers = min(args.subscribers, limit - HEADWAY_OTHER_FILES)
    if subscribers < args.subscribers:
        log(f"the open-file limit ({limit:,}, the hard limit of this process: raising it needs CAP_SYS_RESOURCE) "
            f"holds {subscribers:,} subscribers beside a server's other files, not {args.subscribers:,}: "
            f"both servers run at {subscribers:,}")
    fan = fanout_rounds(subscribers, args, log)
    args.load_after = os.getloadavg()[0]
    rows = fanout_rows(fan, subscribers, args.fanout_seconds, rss_target=0.8)
    print("\n".join(table_lines(rows, peer="nginx+nchan")))
    path = os.path.join(ROOT, "docs/benchmarks.md")
    document = open(path).read() if os.path.exists(path) else ""
    with open(path, "w") as doc:
        doc.write(with_section(document, STREAMS_SECTION, streams_section(args, subscribers, limit, fan, rows)))
    print(f"written: docs/benchmarks.md, \"{STREAMS_SECTION.removeprefix('## ')}\"")


def streams_section(args, subscribers, limit, fan, rows):
    """docs/benchmarks.md's section on tens of thousands of event streams."""
    held = (f"all {subscribers:,} asked for" if subscribers == args.subscribers else
            f"{subscribers:,}, not the {args.subscribers:,} asked for: the open-file limit of this machine's "
            f"processes was {limit:,} (a hard limit that only a process with `CAP_SYS_RESOURCE` may pass, "
            f"withheld here), and one server holds its subscribers and its other files in one process")
    per_round = "; ".join(
        f"{key} " + " / ".join(f"{r['p99_ms']:.0f}" for r in fan[key]) for key in ("headway", "nchan"))
    def rounds(field, scale=1.0, digits=0):
        return "; ".join(f"{key} " + " / ".join(f"{scale * r[field]:.{digits}f}" for r in fan[key])
                         for key in ("headway", "nchan"))
    rss = rounds("rss_per_subscriber_kib", digits=2)
    first = rounds("first_arrival_ms", digits=1)
    spread = "; ".join(f"{key} " + " / ".join(f"{r['last_arrival_ms'] - r['first_arrival_ms']:.0f}" for r in fan[key])
                       for key in ("headway", "nchan"))
    # The server's CPU while delivering, per event delivered: what the load of the machine moves least.
    cpu = "; ".join(f"{key} " + " / ".join(
        f"{r['busy_cpu_percent'] / 100 * args.fanout_seconds / max(1, r['delivered']) * 1e6:.1f}" for r in fan[key])
        for key in ("headway", "nchan"))
    return f"""{STREAMS_SECTION}

Written by `make bench-streams` (`bench/suite.py --streams-only --subscribers {args.subscribers}`) on
{datetime.date.today().isoformat()}, {machine()}. Figures 3 to 5 alone, with many more
subscribers: each server pinned to CPU 0, the subscribers (bench/sse-subscribers.c, one
epoll loop a process, forked into several past one process's open-file limit, from
127.0.0.1, .2, … past 25,000, since one source address has only about 28,000 ports toward
one server port) on CPU 1, nchan and headwayd (`--durability full`) alternately for
{args.fanout_repeat} rounds, the order turning each round; 5 stamped updates/s for
{args.fanout_seconds:.0f} s; medians. Subscribers: {held}. The machine is shared: its load
average (1 minute) was {args.load_before:.2f} before the rounds and {args.load_after:.2f} after them.

{chr(10).join(table_lines(rows, peer="nginx+nchan"))}

Round by round: p99 (ms) {per_round}. RSS per subscriber (KiB) {rss}. First arrival
(ms, the median over the updates of the earliest subscriber to receive each: for headwayd
the request, its commit synced to disk, and the first write) {first}. Spread from the
first subscriber to the last (ms, medians: at most one fan-out lap) {spread}. Server CPU per
event delivered (µs, while delivering) {cpu}.

Raw figures: {fan}.
"""


def busy_rounds(args, log):
    """Figure 6: updates per second while `args.subscribers` subscribers of every task
    receive, and without them (figure 1's load), headwayd `full`, `args.repeat` rounds, the
    order turning each round. A single run swings by a fifth from one minute to the next on
    a shared machine; the rounds put both measures in the same minutes."""
    busy = {"busy": [], "plain": [], "connected": [], "events": []}

    def plain():
        server = servers.Headway("full")
        try:
            busy["plain"].append(servers.wrk_publish(server, seconds=args.seconds)[0])
        finally:
            server.stop()

    def subscribed():
        server = servers.Headway("full")
        try:
            rate, connected, events = servers.publish_while_subscribed(server, subscribers=args.subscribers,
                                                                        seconds=args.seconds)
        finally:
            server.stop()
        busy["busy"].append(rate)
        busy["connected"].append(connected)
        busy["events"].append(round(events, 1))

    for round_ in range(args.repeat):
        for run in (plain, subscribed) if round_ % 2 == 0 else (subscribed, plain):
            run()
        log(f"round {round_ + 1}: updates/s {busy['plain'][-1]:.0f} without subscribers, {busy['busy'][-1]:.0f} while "
            f"{busy['connected'][-1]} receive ({busy['events'][-1]:.1f} events/s each)")
    return busy


def main():
    parser = argparse.ArgumentParser()
    # Five rounds: this machine's speed moves by up to a fifth from one minute to the next,
    # and a median of five is not moved by one slow round (one of three often is).
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--subscribers", type=int, default=10_000)
    parser.add_argument("--small-subscribers", type=int, default=1_000,
                        help="the second fan-out's subscribers (figures 4c, 4d)")
    parser.add_argument("--fanout-seconds", type=float, default=30)
    # Five fan-out rounds too: a round's p99 is set by its slowest one or two updates, and
    # the ratio to nchan moved from 0.77 to 1.29 between three rounds of one run.
    parser.add_argument("--fanout-repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="short runs, to check the suite itself")
    parser.add_argument("--redis-only", action="store_true",
                        help="only headwayd's throughput rounds beside Redis; writes only their section")
    parser.add_argument("--streams-only", action="store_true",
                        help="only the fan-out rounds (figures 3 to 5) at --subscribers; writes only their section")
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.seconds, args.subscribers, args.fanout_seconds, args.fanout_repeat = 1, 3, 1000, 5, 1
        args.small_subscribers = 200
    servers.pin_this_process_to_cpu1()
    log = lambda text: print(text, file=sys.stderr, flush=True)
    args.load_before = os.getloadavg()[0]  # what else the machine was doing
    if args.redis_only:
        redis_only(args, log)
        return
    if args.streams_only:
        streams_only(args, log)
        return

    # 1, 2, 1r, 2r: updates per second, alternating.
    rates, latency_rows, cpu_per_update = throughput_rounds([key for key, _ in CONTENDERS], args.repeat,
                                                            args.seconds, log)
    args.load_after = os.getloadavg()[0]
    median = {key: statistics.median(values) for key, values in rates.items()}

    # 3, 4, 5: fan-out to N subscribers (and 4c, 4d: to fewer), alternating.
    fan = fanout_rounds(args.subscribers, args, log)
    small_fan = fanout_rounds(args.small_subscribers, args, log)

    # 6: updates per second while N subscribers receive, beside figure 1's load run in the
    # same rounds.
    busy = busy_rounds(args, log)
    busy_rate, busy_plain = statistics.median(busy["busy"]), statistics.median(busy["plain"])
    busy_connected, busy_events = min(busy["connected"]), statistics.median(busy["events"])

    # 7: page latency at 1,000,000 vs 1,000 tasks; 8: stall flag lateness with 100,000 running tasks.
    sizes = "1000,100000" if args.quick else "1000,1000000"
    pages = run_script(["bench/list-latency.py", "--sizes", sizes, "--requests", "100" if args.quick else "300"])
    # The first table's plain page: its ratio of p50 latencies (the CPU ratio follows it).
    page_ratio = float(re.search(r"^\| `/v1/tasks` \|.*\| ([0-9.]+) \| [0-9.]+ \|$", pages, re.M).group(1))
    search_ratio = float(re.search(r"search page / plain page at [0-9,]+ tasks: ([0-9.]+)", pages).group(1))
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
        *redis_rows(median),
        *fanout_rows(fan, args.subscribers, args.fanout_seconds, rss_target=1.0)[:3],
        *(("4c" if field == "p50_ms" else "4d",
           f"same with {args.small_subscribers:,} subscribers: publish-to-receive latency {field[:3]}",
           f"{fan_median(small_fan, 'headway', field):.1f} ms", f"{fan_median(small_fan, 'nchan', field):.1f} ms",
           fan_median(small_fan, "headway", field) / fan_median(small_fan, "nchan", field), "≤ 1.0 ×",
           fan_median(small_fan, "headway", field) <= fan_median(small_fan, "nchan", field))
          for field in ("p50_ms", "p99_ms")),
        fanout_rows(fan, args.subscribers, args.fanout_seconds, rss_target=1.0)[3],
        ("6", f"updates/s while {busy_connected:,} subscribers of every task receive (each got "
              f"{busy_events:.0f} events/s, coalesced)", f"{busy_rate:,.0f}/s",
         f"figure 1 in the same rounds: {busy_plain:,.0f}/s", busy_rate / busy_plain, "≥ 0.8 × figure 1",
         busy_rate / busy_plain >= 0.8),
        ("7", f"`GET /v1/tasks` page latency, {int(sizes.split(',')[1]):,} vs 1,000 tasks", f"{page_ratio:.2f} ×", "—",
         page_ratio, "≤ 2 ×", page_ratio <= 2),
        ("7b", f"`GET /v1/tasks?q=` page (a task's name) vs a plain page, {int(sizes.split(',')[1]):,} tasks",
         f"{search_ratio:.2f} ×", "—", search_ratio, "≤ 2 ×", search_ratio <= 2),
        ("8", f"stall flag lateness with {stall_tasks:,} running tasks, p99", f"{stall_p99:.0f} ms", "—", None, "≤ 1 s",
         stall_p99 <= 1000),
    ]
    table = table_lines(rows, peer="nginx+nchan (unless named)")
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
            values = [fan_median(fan, key, f"{label}_ms") for label in labels]
            axis.bar([i + offset for i in range(3)], values, width=0.4, label=name)
        axis.set_xticks(range(3), labels)
        axis.set_ylabel("publish → receive (ms)")
        axis.set_title(f"{args.subscribers:,} SSE subscribers, 5 updates/s (medians of {args.fanout_repeat} runs)")
        axis.legend()
        figure.tight_layout()
        figure.savefig(plot, dpi=110)
    except ImportError:
        plot = None

    # Sections written by other benchmarks (`## …`, e.g. bench/tls-fanout.py's) are kept.
    path = os.path.join(ROOT, "docs/benchmarks.md")
    previous = open(path).read() if os.path.exists(path) else ""
    kept = previous[previous.find("\n## "):] if "\n## " in previous else ""
    with open(path, "w") as doc:
        doc.write(f"""# Benchmarks: headwayd beside nginx + nchan and Redis

Written by `make bench` (`bench/suite.py{' --quick' if args.quick else ''}`) on
{datetime.date.today().isoformat()}, {machine()}. Each server ran alone, pinned to CPU 0, with
the load on CPU 1; throughput rounds alternate nchan / headwayd full / headwayd normal /
Redis (appendfsync always, then everysec: figures 1r and 2r, see "{REDIS_SECTION.removeprefix('## ')}")
({args.repeat} rounds, medians of {args.seconds} s wrk runs, 50 keep-alive connections, the
same ~100-byte JSON body); fan-out rounds alternate nchan / headwayd ({args.fanout_repeat}
rounds, {args.subscribers:,} EventSource subscribers of one channel/task read by one epoll
client in C, bench/sse-subscribers.c, 5 stamped updates/s for {args.fanout_seconds:.0f} s; the same with
{args.small_subscribers:,} subscribers for figures 4c and 4d); the order of the servers turns
each round. Figure 6: {args.subscribers:,} subscribers of every task, each with its snapshot,
then wrk updating 50 tasks for {args.seconds} s, in {args.repeat} rounds, each beside a run of figure 1's load
(`--durability full`, no subscribers), the order turning each round; the medians of both
are compared. nchan keeps messages in shared memory;
every headwayd 2xx is a committed SQLite transaction.

{chr(10).join(table)}

![publish-to-receive latency](benchmarks-latency.png)

Raw figures: publishes/s per round {rates}; fan-out results {fan}; with {args.small_subscribers:,} subscribers {small_fan}; figure 6's rounds {busy}.
""" + kept)
    print(f"written: docs/benchmarks.md{' and ' + plot if plot else ''}")
    write_redis_section(args, median, rates, latency_rows, cpu_per_update)

    # One daemon on SQLite, one on PostgreSQL, two sharing a PostgreSQL database: its own
    # section of docs/benchmarks.md, written by the script.
    short = ["--repeat", "1", "--seconds", "3", "--fanout-seconds", "3", "--subscribers", "200"] if args.quick else []
    print(run_script(["bench/postgres-scaling.py", "--write-doc", *short]), end="")


if __name__ == "__main__":
    main()
