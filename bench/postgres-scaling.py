#!/usr/bin/env python3
"""One headwayd on SQLite, one on PostgreSQL, and two sharing one PostgreSQL database,
side by side: updates per second, fan-out latency, and where the CPU goes.

A private PostgreSQL server (Tests/integration/pgserver.py, with PostgreSQL's default
shared_buffers of 128 MB instead of the tests' 16 MB) runs for the whole script; each
run gets a fresh database on it (SQLite runs a fresh file). The daemons and every
PostgreSQL process are pinned to CPU 0 — the database shares the server's core — and
the load (wrk, the epoll subscriber client) to CPU 1. REPEAT rounds, the order of the
setups turning each round; the tables show medians. For each setup:

- throughput: wrk with `bench/progress.lua` for SECONDS, 50 connections on one daemon, or
  25 on each of two daemons at once (summed), at `--durability full` and `normal` over 50
  tasks, and at `full` over 10,000 tasks (a history point with nearly every update); the
  daemons' CPU (utime+stime from /proc/PID/stat) and PostgreSQL's (every server process,
  and the children it reaped, from /proc; and apart, its busiest process per daemon: the
  writer's session) over the run, each divided by the updates acknowledged; the writers'
  jobs per committed batch and commit time from `/metrics`; the WAL written per update;
- fan-out (`--durability full`): SUBSCRIBERS event-stream subscribers of one task (half
  on each daemon of two), RATE stamped updates per second posted to the first daemon for
  FANOUT_SECONDS; the delay from each update's acknowledgement (its 2xx read by the
  poster) to its arrival at each subscriber, p50/p99, for the subscribers of the daemon
  that took the write and, with two daemons, separately for those of the other one
  (delivered through NOTIFY and a read of the change feed); each daemon's CPU per event
  it delivered.

Then, once, the statements the writer sends per batch and per update, counted in the
server's log with `log_statement = all` (`statements_per_update`).

Prints two tables; `--write-doc` also writes them into docs/benchmarks.md as the section
"PostgreSQL and several daemons" (replacing it if there).

    bench/postgres-scaling.py [--repeat 3] [--seconds 10] [--subscribers 1000] [--rate 5] [--fanout-seconds 10]
                              [--write-doc]
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402

ROOT = servers.ROOT
sys.path.insert(0, os.path.join(ROOT, "Tests/integration"))
import pgserver  # noqa: E402

SECTION = "## PostgreSQL and several daemons"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# PostgreSQL's own default (the tests' server keeps 16 MB to stay small); later lines of
# postgresql.conf override earlier ones.
pgserver.SERVER_SETTINGS += "shared_buffers = 128MB\n"

# The loads of the throughput runs: (key, durability, tasks). With 50 tasks each task
# takes about a hundred updates a second, so most updates change the task's row only; with
# 10,000, wrk's round-robin reaches each task about every two seconds, so nearly every
# update also writes a history point (at most one per task and second), as runners that
# report once a second do.
LOADS = [("full", "full", 50), ("normal", "normal", 50), ("full-10k", "full", 10_000)]
# The setups: (key, label, daemons, on PostgreSQL).
SETUPS = [("sqlite", "1 daemon, SQLite", 1, False),
          ("pg1", "1 daemon, PostgreSQL", 1, True),
          ("pg2", "2 daemons, one PostgreSQL database", 2, True)]


# -- CPU time from /proc

def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (field 3 is index 0)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def process_cpu_seconds(pid):
    """user + system CPU of a process, every thread, living or ended (as cpu-per-update.sh)."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def descendants(root):
    """The pids of `root`'s children, their children, and so on."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                children.setdefault(int(stat_fields(entry)[1]), []).append(int(entry))
            except (OSError, IndexError):
                pass  # ended meanwhile
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Postgres:
    """The private server, pinned to CPU 0, and what its processes have spent."""

    def __init__(self):
        self.state = tempfile.mkdtemp(prefix="headway-bench-pg-")
        self.server = pgserver.PostgresServer(self.state).start()
        with open(self.server.data_directory / "postmaster.pid") as pid_file:
            self.postmaster = int(pid_file.readline())
        # Backends forked later inherit the postmaster's affinity.
        for pid in [self.postmaster, *descendants(self.postmaster)]:
            subprocess.run(["taskset", "-a", "-p", "-c", "0", str(pid)], check=True, capture_output=True)
        self.databases = 0

    def fresh_database(self):
        """A URL of a new, empty database."""
        self.databases += 1
        name = f"bench_{self.databases}"
        self.server.create_database(name)
        return self.server.url(name)

    def cpu_seconds(self):
        """user + system CPU of the postmaster, of every server process alive, and of the
        ones that ended (counted in the postmaster's cutime and cstime once reaped)."""
        fields = stat_fields(self.postmaster)
        total = sum(int(fields[index]) for index in (11, 12, 13, 14)) / CLOCK_TICKS
        for pid in descendants(self.postmaster):
            try:
                total += process_cpu_seconds(pid)
            except OSError:
                pass  # ended between the listing and the read: counted in cutime next time
        return total

    def session_cpu_seconds(self):
        """user + system CPU of each server process alive, by pid."""
        seconds = {}
        for pid in descendants(self.postmaster):
            try:
                seconds[pid] = process_cpu_seconds(pid)
            except OSError:
                pass
        return seconds

    def stop(self):
        """Stops the server and removes its files."""
        self.server.stop()
        self.server.remove()
        shutil.rmtree(self.state, ignore_errors=True)


# -- the daemons

def start_daemons(postgres, count, durability):
    """`count` headwayd sharing a fresh database (PostgreSQL when `postgres`, else SQLite)."""
    database = postgres.fresh_database() if postgres else None
    daemons = []
    try:
        for _ in range(count):
            daemons.append(servers.Headway(durability, database=database))
    except BaseException:
        stop_daemons(daemons)
        raise
    return daemons


def stop_daemons(daemons):
    for daemon in daemons:
        daemon.stop()


def register_tasks(daemon, names, threads=16):
    """Registers the tasks `names` on `daemon` over `threads` connections at once."""
    def register(share):
        daemon.prepare_channels(share)
    workers = [threading.Thread(target=register, args=(names[index::threads],)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def wal_position(postgres):
    """The server's current WAL position, in bytes."""
    return int(postgres.server.psql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").strip())


def heap_only_share(postgres):
    """The share of the updates of `tasks` in the latest fresh database that wrote no index
    (heap-only tuples), from the server's statistics, or None. Read once the daemons'
    sessions have ended (each reports its statistics as it ends), waiting a bounded while."""
    name = f"bench_{postgres.databases}"
    for _ in range(100):
        if postgres.server.psql(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'").strip() == "0":
            break
        time.sleep(0.05)
    row = postgres.server.psql("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'tasks'",
                               database=name).strip()
    updates, heap_only = (int(value) for value in row.split("|"))
    return heap_only / updates if updates else None


def writer_batches(daemon):
    """(jobs, batches committed, seconds committing, seconds inside the ordering lock or None
    when the daemon has no such counter, batches run again for having lost their order or
    None) of the daemon's writer so far, from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}/metrics", timeout=30) as reply:
        text = reply.read().decode()

    def value(name, absent=0.0):
        match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        return float(match.group(1)) if match else absent
    return (value("headway_writer_batch_size_sum"), value("headway_writer_batch_size_count"),
            value("headway_writer_commit_duration_seconds_sum"),
            value("headway_ordering_lock_seconds_total", absent=None),
            value("headway_ordering_reruns_total", absent=None))


def cpu_of(daemons, postgres):
    """Each daemon's CPU seconds so far, and PostgreSQL's (0 without it)."""
    return [process_cpu_seconds(d.pid) for d in daemons], (postgres.cpu_seconds() if postgres else 0.0)


# -- throughput

def throughput(postgres, daemon_count, durability, seconds, connections=50, tasks=50):
    """wrk on every daemon at once, `connections` split between them; returns the figures."""
    daemons = start_daemons(postgres, daemon_count, durability)
    try:
        registering = time.monotonic()
        register_tasks(daemons[0], [f"bench-{i}" for i in range(tasks)])
        registering = time.monotonic() - registering
        wal_before = wal_position(postgres) if postgres else 0
        batches_before = [writer_batches(d) for d in daemons]
        daemon_cpu_before, postgres_cpu_before = cpu_of(daemons, postgres)
        sessions_before = postgres.session_cpu_seconds() if postgres else {}
        environment = dict(os.environ, BENCH_TASKS=str(tasks), BENCH_PATH=daemons[0].publish_path("CHANNEL"))
        loads = [subprocess.Popen(
            ["taskset", "-c", "1", "wrk", "-t1", f"-c{connections // daemon_count}", f"-d{seconds}s", "-s",
             os.path.join(ROOT, "bench/progress.lua"), f"http://127.0.0.1:{d.port}"],
            env=environment, stdout=subprocess.PIPE, text=True) for d in daemons]
        outputs = [load.communicate()[0] for load in loads]
        sessions_after = postgres.session_cpu_seconds() if postgres else {}
        daemon_cpu_after, postgres_cpu_after = cpu_of(daemons, postgres)
        batches_after = [writer_batches(d) for d in daemons]
        wal_after = wal_position(postgres) if postgres else 0
    finally:
        stop_daemons(daemons)
    heap_only = heap_only_share(postgres) if postgres else None
    # Each daemon's writer session is the busiest server process: it runs every write,
    # and reads the other daemon's changes.
    session_deltas = sorted((sessions_after[pid] - sessions_before[pid] for pid in sessions_after
                             if pid in sessions_before), reverse=True)
    writer_sessions = sum(session_deltas[:daemon_count])
    results = []
    for output in outputs:
        line = next(l for l in output.splitlines() if l.startswith("RESULT"))
        results.append({key: float(value) for key, value in (part.split("=") for part in line.split()[1:])})
        if results[-1]["errors"]:
            print(f"wrk saw errors: {line}", file=sys.stderr, flush=True)
    requests = sum(r["requests"] for r in results)
    jobs, batches, committing = (sum(after[i] - before[i] for before, after in zip(batches_before, batches_after))
                                 for i in range(3))
    # Seconds from taking the ordering lock to the end of COMMIT, summed over the daemons
    # (SharedWriting's counter); None when a daemon does not count them (SQLite, older builds).
    locked = (None if any(b[3] is None for b in batches_before + batches_after)
              else sum(after[3] - before[3] for before, after in zip(batches_before, batches_after)))
    reruns = (None if any(b[4] is None for b in batches_before + batches_after)
              else sum(after[4] - before[4] for before, after in zip(batches_before, batches_after)))
    return {
        "updates_per_second": sum(r["rps"] for r in results),
        "requests": requests,
        "errors": sum(r["errors"] for r in results),
        "p50_ms": max(r["p50_ms"] for r in results), "p99_ms": max(r["p99_ms"] for r in results),
        "jobs_per_batch": jobs / max(1, batches),
        "batches_per_second": batches / seconds,
        "commit_ms": 1000 * committing / max(1, batches),
        "daemon_cpu_us_per_update": 1e6 * sum(daemon_cpu_after[i] - daemon_cpu_before[i]
                                              for i in range(daemon_count)) / max(1, requests),
        "postgres_cpu_us_per_update": 1e6 * (postgres_cpu_after - postgres_cpu_before) / max(1, requests),
        "writer_sessions_cpu_us_per_update": 1e6 * writer_sessions / max(1, requests),
        "wal_bytes_per_update": (wal_after - wal_before) / max(1, requests),
        # Updates of `tasks` that wrote no index entry (heap-only tuples), registrations' aside.
        "heap_only_share": heap_only,
        # The tasks registered before the run (16 connections at once, on the first daemon).
        "registrations_per_second": tasks / registering,
        "lock_us_per_update": None if locked is None else 1e6 * locked / max(1, requests),
        # Batches run again (a share of those committed) because another daemon wrote a task
        # they read before taking their place in the order.
        "reruns_per_batch": None if reruns is None else reruns / max(1, batches),
        "per_daemon_updates_per_second": [r["rps"] for r in results],
    }


# -- fan-out

def percentile(values, fraction):
    return values[max(0, int(len(values) * fraction) - 1)] if values else float("nan")


def fanout(postgres, daemon_count, subscribers, rate, seconds, task="fanout"):
    """Subscribers split between the daemons, stamped updates posted to the first; returns
    delivery, acknowledgement-to-arrival latency and CPU, per daemon."""
    daemons = start_daemons(postgres, daemon_count, "full")
    try:
        daemons[0].prepare_channels([task])
        request = daemons[0].subscribe_request(task)
        shares = [subscribers // daemon_count + (1 if i < subscribers % daemon_count else 0)
                  for i in range(daemon_count)]
        clients = servers.Subscribers(daemons[0].port, shares[0], request, keep_arrivals=True)
        for daemon, share in zip(daemons[1:], shares[1:]):
            clients.add(daemon.port, share, request)
        clients.wait_until_ready()
        acknowledged = {}  # stamp → when its 2xx was read (ns)

        def post_updates():
            api = servers.connection(daemons[0])
            next_time = time.monotonic()
            for _ in range(int(seconds * rate)):
                next_time += 1.0 / rate
                stamp = time.time_ns()
                api.request("POST", daemons[0].publish_path(task), body=servers.body(stamp_ns=stamp),
                            headers={"Content-Type": "application/json"})
                response = api.getresponse()
                response.read()
                if 200 <= response.status < 300:
                    acknowledged[stamp] = time.time_ns()
                time.sleep(max(0.0, next_time - time.monotonic()))

        poster = threading.Thread(target=post_updates)
        daemon_cpu_before, postgres_cpu_before = cpu_of(daemons, postgres)
        started = time.monotonic()
        poster.start()
        while poster.is_alive():
            clients.pump(0.05)
        drain_until = time.monotonic() + 2
        while time.monotonic() < drain_until:
            clients.pump(0.05)
        daemon_cpu_after, postgres_cpu_after = cpu_of(daemons, postgres)
        elapsed = time.monotonic() - started
        clients.close()
    finally:
        stop_daemons(daemons)
    groups = []
    for index, daemon in enumerate(daemons):
        states = [s for s in clients.states if s["port"] == daemon.port]
        connected = sum(s["open"] for s in states)
        arrivals = [(stamp, arrival) for s in states for stamp, arrival in s["arrivals"] if stamp in acknowledged]
        delays = sorted((arrival - acknowledged[stamp]) / 1e6 for stamp, arrival in arrivals)
        from_send = sorted((arrival - stamp) / 1e6 for stamp, arrival in arrivals)
        delivered = sum(s["events"] for s in states)
        groups.append({
            "daemon": "took the writes" if index == 0 else "other daemon",
            "subscribers": connected,
            "delivered": delivered, "expected": connected * len(acknowledged),
            "p50_ms": statistics.median(delays) if delays else float("nan"),
            "p99_ms": percentile(delays, 0.99),
            "from_send_p50_ms": statistics.median(from_send) if from_send else float("nan"),
            "from_send_p99_ms": percentile(from_send, 0.99),
            "daemon_cpu_us_per_event": 1e6 * (daemon_cpu_after[index] - daemon_cpu_before[index]) / max(1, delivered),
        })
    round_trips = sorted((acknowledged[stamp] - stamp) / 1e6 for stamp in acknowledged)
    return {"acknowledged": len(acknowledged), "groups": groups,
            "post_round_trip_p50_ms": statistics.median(round_trips) if round_trips else float("nan"),
            "postgres_cpu_percent": 100 * (postgres_cpu_after - postgres_cpu_before) / elapsed}


# -- round trips under the lock

LOGGED_STATEMENT = re.compile(r"\[(\d+)\] LOG:  (?:statement|execute [^:]*): (.*)")


def set_statement_logging(postgres, value):
    """Sets `log_statement` for the whole server and waits until a new session sees it
    (the server signals its sessions as it reloads, so each applies it before its next
    statement)."""
    postgres.server.psql(f"ALTER SYSTEM SET log_statement = '{value}'")
    postgres.server.psql("SELECT pg_reload_conf()")
    for _ in range(200):
        if postgres.server.psql("SHOW log_statement").strip() == value:
            return
    raise RuntimeError(f"log_statement did not become {value}")


def logged_statements(postgres, start, end):
    """(pid, statement) of every statement the server logged between two offsets of its log."""
    with open(postgres.server.log_file, "rb") as log:
        log.seek(start)
        text = log.read(end - start).decode(errors="replace")
    return [(int(m.group(1)), m.group(2)) for m in map(LOGGED_STATEMENT.search, text.splitlines()) if m]


def statements_per_update(postgres, updates=300, seconds=3, tasks=50):
    """How many statements (each one round trip to PostgreSQL) the writer sends per batch
    and per update over `tasks` tasks, counted in the server's log (`log_statement = all`
    for this run only): `updates` updates one after the other (small batches), then wrk
    with 50 connections for `seconds` (large batches); solved for both, the statements of
    a batch (the change listener's empty batches included) and of an update."""
    daemons = start_daemons(postgres, 1, "full")
    log_size = lambda: os.path.getsize(postgres.server.log_file)
    try:
        daemon = daemons[0]
        register_tasks(daemon, [f"bench-{i}" for i in range(tasks)])
        set_statement_logging(postgres, "all")
        try:
            phases = []
            for phase in ("one by one", "wrk"):
                offset, batches_before = log_size(), writer_batches(daemon)[1]
                if phase == "one by one":
                    api = servers.connection(daemon)
                    for counter in range(updates):
                        api.request("POST", daemon.publish_path(f"bench-{counter % tasks}"),
                                    body=servers.body(counter=counter), headers={"Content-Type": "application/json"})
                        response = api.getresponse()
                        response.read()
                        assert response.status == 200, response.status
                    api.close()
                    acknowledged = updates
                else:
                    environment = dict(os.environ, BENCH_TASKS=str(tasks), BENCH_PATH=daemon.publish_path("CHANNEL"))
                    output = subprocess.run(
                        ["taskset", "-c", "1", "wrk", "-t1", "-c50", f"-d{seconds}s", "-s",
                         os.path.join(ROOT, "bench/progress.lua"), f"http://127.0.0.1:{daemon.port}"],
                        env=environment, capture_output=True, text=True, check=True).stdout
                    acknowledged = int(re.search(r"RESULT requests=(\d+)", output).group(1))
                batches_after = writer_batches(daemon)[1]
                phases.append((logged_statements(postgres, offset, log_size()), acknowledged,
                               batches_after - batches_before))
        finally:
            set_statement_logging(postgres, "none")
    finally:
        stop_daemons(daemons)
    # The writer's session is the one that locks stream_state; the others (reads, the
    # listener, leadership) are not counted.
    writer = next(pid for pid, sql in phases[0][0] if "FOR UPDATE" in sql or "advisory_xact_lock" in sql)
    (alone, n_alone, b_alone), (busy, n_busy, b_busy) = [
        (sum(pid == writer for pid, _ in statements), acknowledged, batches)
        for statements, acknowledged, batches in phases]
    # alone = b_alone * per_batch + n_alone * per_job; busy = b_busy * per_batch + n_busy * per_job
    determinant = b_alone * n_busy - b_busy * n_alone
    per_batch = (alone * n_busy - busy * n_alone) / determinant
    # A count of statements: a solve a hair below zero (no statement per update) is rounding.
    per_job = max((b_alone * busy - b_busy * alone) / determinant, 0.0)
    one_batch, inside = [], False
    for pid, sql in phases[0][0]:
        if pid != writer:
            continue
        inside = inside or sql.startswith("BEGIN")
        if inside:
            one_batch.append(" ".join(sql.split())[:90])
            if sql.startswith("COMMIT"):
                break
    return {"one_by_one": {"updates": n_alone, "batches": b_alone, "statements": alone},
            "wrk": {"updates": n_busy, "batches": b_busy, "statements": busy},
            "per_batch": per_batch, "per_job": per_job, "one_update_batch": one_batch}


# -- the report

def median_result(results):
    """The median of each figure of several runs' `results` (lists element by element,
    dictionaries key by key, text as the first run has it)."""
    first = results[0]
    if isinstance(first, dict):
        return {key: median_result([r[key] for r in results]) for key in first}
    if isinstance(first, list):
        return [median_result([r[index] for r in results]) for index in range(len(first))]
    if isinstance(first, (int, float)):
        return statistics.median(results)
    if first is None:
        numbers = [r for r in results if r is not None]
        return statistics.median(numbers) if numbers else None
    return first


def microseconds(value):
    """`value` µs, or n/a when not measured."""
    return "n/a" if value is None else f"{value:.1f} µs"


def goals_table(figures):
    """What the goals of issue 50 compare, per load, from the same run: one daemon on
    PostgreSQL against one on SQLite, two daemons against one, PostgreSQL's CPU and the
    time inside the ordering lock per update."""
    table = ["| durability | tasks | SQLite updates/s | PostgreSQL, 1 daemon | 1 daemon PostgreSQL / SQLite | "
             "2 daemons | 2 daemons / 1 daemon | PostgreSQL CPU per update, 1 / 2 daemons | "
             "inside the ordering lock per update, 1 / 2 daemons |", "|---|---|---|---|---|---|---|---|---|"]
    for load, durability, tasks in LOADS:
        sqlite, one, two = (figures["throughput"][key][load] for key in ("sqlite", "pg1", "pg2"))
        table.append(
            f"| {durability} | {tasks:,} | {sqlite['updates_per_second']:,.0f} | {one['updates_per_second']:,.0f} | "
            f"{one['updates_per_second'] / max(1, sqlite['updates_per_second']):.2f}× | {two['updates_per_second']:,.0f} | "
            f"{two['updates_per_second'] / max(1, one['updates_per_second']):.2f}× | "
            f"{one['postgres_cpu_us_per_update']:.1f} / {two['postgres_cpu_us_per_update']:.1f} µs | "
            f"{microseconds(one['lock_us_per_update'])} / {microseconds(two['lock_us_per_update'])} |")
    return "\n".join(table)


def heap_only(figures):
    """The share of heap-only updates of `tasks`, as a percentage, or — when not measured."""
    share = figures.get("heap_only_share")
    return "—" if share is None else f"{100 * share:.0f} %"


def tables(figures, args):
    """The two Markdown tables."""
    throughput_table = [
        "| setup | durability | tasks | updates/s | wrk p50 / p99 | jobs per batch | batches/s | commit | "
        "daemon CPU per update | PostgreSQL CPU per update (writer sessions) | WAL per update (heap-only) |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, label, _, on_postgres in SETUPS:
        for load, durability, tasks in LOADS:
            r = figures["throughput"][key][load]
            split = (" (" + " + ".join(f"{rate:,.0f}" for rate in r["per_daemon_updates_per_second"]) + ")"
                     if len(r["per_daemon_updates_per_second"]) > 1 else "")
            throughput_table.append(
                f"| {label} | {durability} | {tasks:,} | {r['updates_per_second']:,.0f}{split} | {r['p50_ms']:.1f} / "
                f"{r['p99_ms']:.1f} ms | {r['jobs_per_batch']:.1f} | {r['batches_per_second']:,.0f} | "
                f"{r['commit_ms']:.2f} ms | {r['daemon_cpu_us_per_update']:.1f} µs | "
                + (f"{r['postgres_cpu_us_per_update']:.1f} µs ({r['writer_sessions_cpu_us_per_update']:.1f} µs) | "
                   f"{r['wal_bytes_per_update']:,.0f} B ({heap_only(r)}) |" if on_postgres else "— | — |"))
    fanout_table = [
        "| setup | subscribers of | subscribers | delivered / expected | ack → arrival p50 / p99 | "
        "send → arrival p50 / p99 | daemon CPU per event delivered | PostgreSQL CPU (of a core) |",
        "|---|---|---|---|---|---|---|---|"]
    for key, label, _, on_postgres in SETUPS if figures["fanout"] else []:
        result = figures["fanout"][key]
        for group in result["groups"]:
            fanout_table.append(
                f"| {label} | {group['daemon']} | {group['subscribers']:,.0f} | {group['delivered']:,.0f} / "
                f"{group['expected']:,.0f} | {group['p50_ms']:.1f} / {group['p99_ms']:.1f} ms | "
                f"{group['from_send_p50_ms']:.1f} / {group['from_send_p99_ms']:.1f} ms | "
                f"{group['daemon_cpu_us_per_event']:.1f} µs | "
                + (f"{result['postgres_cpu_percent']:.1f}% |" if on_postgres else "— |"))
    return "\n".join(throughput_table), "\n".join(fanout_table)


def section(figures, args, throughput_table, fanout_table):
    machine = f"{os.cpu_count()} cores, {platform.machine()}, Linux {platform.release()}"
    command = " ".join(["bench/postgres-scaling.py", *(a for a in sys.argv[1:] if a != "--write-doc")])
    version = subprocess.run([os.path.join(pgserver.bin_directory(), "postgres"), "--version"],
                             capture_output=True, text=True).stdout.strip()
    statements_table = "\n".join(
        ["| tasks | one by one: updates, statements, batches | wrk: updates, statements, batches | "
         "statements per batch | per update |", "|---|---|---|---|---|"] +
        [f"| {int(tasks):,} | {st['one_by_one']['updates']:,}, {st['one_by_one']['statements']:,}, "
         f"{st['one_by_one']['batches']:,.0f} | {st['wrk']['updates']:,}, {st['wrk']['statements']:,}, "
         f"{st['wrk']['batches']:,.0f} | {st['per_batch']:.1f} | {st['per_job']:.1f} |"
         for tasks, st in figures["statements"].items()])
    last_tasks = max(int(tasks) for tasks in figures["statements"])
    round_trips = ", ".join(f"{label} {figures['fanout'][key]['post_round_trip_p50_ms']:.1f} ms"
                            for key, label, _, _ in SETUPS)
    return f"""{SECTION}

Written by `{command}` (`make bench-postgres`, and by `make bench`) on
{datetime.date.today().isoformat()}, {machine}, {version}; load average
{figures['load_before']} before, {figures['load_after']} after (the machine was not
reserved). A private PostgreSQL server (`Tests/integration/pgserver.py`: Unix socket,
`fsync` on, `shared_buffers` 128 MB) ran for the whole run, each run on a fresh database.
The daemons **and every PostgreSQL process share CPU 0**; the load (wrk, the subscribers'
epoll client) runs on CPU 1. So two daemons here split one core with their database: the
figures measure what sharing costs, not how far more machines go (see
[scaling.md](scaling.md)).

Every figure is the median of {args.repeat} rounds; the order of the setups turns each round.

Updates: wrk with `bench/progress.lua` for {args.seconds} s, 50 keep-alive connections on
one daemon, or 25 on each of two daemons at once (their sum, each daemon's share in
brackets), spread over 50 tasks (about a hundred updates per task and second: most
updates change the task's row only) or over 10,000 (each task reached about every two
seconds: nearly every update also writes a history point, as with runners reporting once
a second). p50 / p99 is wrk's (the worse daemon's of two). Jobs per batch,
batches per second and the mean commit time (from `BEGIN` to the end of `COMMIT`) come
from the daemons' `/metrics` (`headway_writer_batch_size`,
`headway_writer_commit_duration_seconds`), summed over both daemons. CPU per update is
user + system time from `/proc` over the run divided by the updates acknowledged: the
daemon's (both daemons' together) and PostgreSQL's (every server process: backends,
WAL writer, checkpointer…), and in brackets that of the writers' sessions alone (the
busiest server process of each daemon: the one running its batches, which hold the lock).
WAL per update: how far the server's WAL position moved over the run, per update; in
brackets the share of the updates of `tasks` that were heap-only (no index written: the
server's `n_tup_hot_upd` over `n_tup_upd`).

{throughput_table}

Issue 50's goals, from the same rounds (medians): one daemon on PostgreSQL against one
on SQLite, two daemons on one database against one, PostgreSQL's CPU per update (every
server process), and the time inside the ordering lock per update: the daemons'
`headway_ordering_lock_seconds_total` (from taking the lock that orders every daemon's
batches to the end of their `COMMIT`) over the run, divided by the updates (n/a: the
build has no such counter).

{goals_table(figures)}

Fan-out (`--durability full`): {args.subscribers:,} event-stream subscribers of one task (half
on each of two daemons), {args.rate:g} stamped updates/s posted to the first daemon for
{args.fanout_seconds:g} s. The delay runs from the moment the poster read the update's 2xx to
the event's arrival at a subscriber (it can be slightly negative: the event may overtake
the reply); "send → arrival" runs from just before the POST was sent, as in figure 4
(`bench/sse-fanout.py`), and includes the commit. "Other daemon": subscribers of the daemon that did not take the write, which
learns of it by `LISTEN`/`NOTIFY` and reads it from the change feed. CPU per event: the
daemon's CPU over the run divided by the events it delivered (its writes and its idle
work included); PostgreSQL's CPU as a share of one core over the run (the writes, the
feed reads, the listener's and the leadership's statements each second, its background
processes). The POST's own round trip (send → 2xx), median: {round_trips}.

{fanout_table}

Statements under the lock: one more run per number of tasks (one daemon on PostgreSQL,
`full`) with `log_statement = all`, counting the statements of the writer's session in
the server's log: 300 updates sent one after the other, then wrk with 50 connections for
3 s; the batches from `/metrics` (those with one update, and the change listener's empty
ones, in the first part). Solved for both parts: the statements of a batch and of a
progress update, all but `BEGIN` while the batch holds the lock that orders every
daemon's batches. A batch's held writes go as one statement per table, sent in one
pipeline with its last statement and its `COMMIT` (one round trip for them all).

{statements_table}

A batch of one update over {last_tasks:,} tasks:

```
{chr(10).join(figures['statements'][str(last_tasks)]['one_update_batch'])}
```

What these figures mean for a deployment: [scaling.md](scaling.md). Raw figures:
`{json.dumps(figures, separators=(",", ":"))}`
"""


def write_section(text):
    """Puts `text` into docs/benchmarks.md in place of its section, or at its end."""
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
    parser.add_argument("--seconds", type=int, default=10, help="each throughput run")
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=5.0, help="updates per second in the fan-out runs")
    parser.add_argument("--fanout-seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the tables show medians")
    parser.add_argument("--write-doc", action="store_true", help="write the section into docs/benchmarks.md")
    parser.add_argument("--throughput-only", action="store_true",
                        help="only the updates and the statements counted (no fan-out; not with --write-doc)")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()
    if args.throughput_only and args.write_doc:
        parser.error("--write-doc needs the fan-out figures too")
    servers.pin_this_process_to_cpu1()
    # The poster thread notes each acknowledgement as soon as it reads it, not when the
    # subscribers' loop next lets go of the interpreter (5 ms by default).
    sys.setswitchinterval(0.0002)
    log = lambda text: print(text, file=sys.stderr, flush=True)
    figures = {"load_before": " ".join(f"{v:.1f}" for v in os.getloadavg()), "throughput": {}, "fanout": {}}
    postgres = Postgres()
    try:
        rounds = {"throughput": {}, "fanout": {}}
        for round_ in range(args.repeat):
            # The order of the setups turns each round, so none always runs first.
            setups = SETUPS[round_ % 3:] + SETUPS[:round_ % 3]
            for key, label, daemon_count, on_postgres in setups:
                for load, durability, tasks in LOADS:
                    result = throughput(postgres if on_postgres else None, daemon_count, durability, args.seconds,
                                        tasks=tasks)
                    assert result["errors"] == 0, f"{label} {load}: {result['errors']} errors"
                    rounds["throughput"].setdefault(key, {}).setdefault(load, []).append(result)
                    log(f"round {round_ + 1}, {label}, {durability}, {tasks} tasks: "
                        f"{result['updates_per_second']:,.0f} updates/s, {result['jobs_per_batch']:.1f} jobs per batch, "
                        f"daemon {result['daemon_cpu_us_per_update']:.1f} µs + PostgreSQL "
                        f"{result['postgres_cpu_us_per_update']:.1f} µs per update, inside the ordering lock "
                        f"{microseconds(result['lock_us_per_update'])}"
                        + ("" if result.get("reruns_per_batch") is None
                           else f", {100 * result['reruns_per_batch']:.1f} % of batches run again"))
            for key, label, daemon_count, on_postgres in setups if not args.throughput_only else []:
                result = fanout(postgres if on_postgres else None, daemon_count, args.subscribers, args.rate,
                                args.fanout_seconds)
                rounds["fanout"].setdefault(key, []).append(result)
                log(f"round {round_ + 1}, {label}, fan-out: {result}")
        figures["throughput"] = {key: {load: median_result(results) for load, results in loads.items()}
                                 for key, loads in rounds["throughput"].items()}
        figures["fanout"] = {key: median_result(results) for key, results in rounds["fanout"].items()}
        figures["rounds"] = rounds
        figures["statements"] = {str(tasks): statements_per_update(postgres, tasks=tasks)
                                 for tasks in sorted({tasks for _, _, tasks in LOADS})}
    finally:
        postgres.stop()
    figures["load_after"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
    throughput_table, fanout_table = tables(figures, args)
    print(throughput_table + "\n\n" + goals_table(figures) + "\n\n" + (fanout_table + "\n" if figures["fanout"] else ""))
    if args.json:
        with open(args.json, "w") as output:
            json.dump(figures, output)
    for tasks, statements in figures["statements"].items():
        print(f"statements sent by the writer over {int(tasks):,} tasks: {statements['per_batch']:.1f} per batch "
              f"+ {statements['per_job']:.1f} per progress update")
    if args.write_doc:
        write_section(section(figures, args, throughput_table, fanout_table))
        print("written: docs/benchmarks.md, section " + SECTION[3:])


if __name__ == "__main__":
    main()
