#!/usr/bin/env python3
"""Soak test: an hour of steady load, the daemon's resources sampled every minute.

Starts headwayd (pinned to CPU 0, like every benchmark, through servers.Headway) with a
short --retention and --stall-timeout, then keeps a steady load on it from processes
pinned to CPU 1:
  - RUNNERS runner processes, each with one keep-alive connection, keep TASKS child tasks
    running and send RATE progress updates per second in all (paced, not flat out); a task
    finishes when it reaches its total and another takes its place; a few are deleted once
    finished (tombstones), a few go silent past the stall timeout and then either recover
    or finish as failed. Children belong to PARENTS pipelines: a run of a pipeline (a
    parent task) takes CHILDREN children, then finishes with its last one while the next
    run takes the following ones (retention forgets a child only once its parent finished);
  - one subscriber process holds SUBSCRIBERS event streams on one epoll loop: DASHBOARDS of
    them follow every task, each of the others a run of one pipeline and its children,
    moving to the next run when it finishes; a stream that is cut off reconnects with
    Last-Event-ID.
Every SAMPLE seconds it records the daemon's RSS and VmHWM, open fds, the database and WAL
sizes, progress latency p50/p99, publish-to-receive latency p50/p99 (from a tenth of the
followers), updates/s, events received/s, tasks stored and rows pruned by retention, to a
CSV and a plot with one panel per measure; at the end it prints a verdict per measure
(medians of the first and last thirds of the samples after a warm-up, with their noise).

    bench/soak.py [--minutes 60] [--sample-seconds 60] [--subscribers 1000] [--runners 4]
                  [--rate 2000] [--tasks 400] [--parents 100] [--children-per-parent 20]
                  [--retention 60s] [--stall-timeout 5] [--headwayd PATH] [--out docs/soak]
"""
import argparse
import datetime
import http.client
import multiprocessing
import os
import random
import re
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402

# A task.updated frame of a child, its label stamped with the send time by a runner.
UPDATE_STAMP = re.compile(rb'event: task\.updated\ndata: [^\n]*?"label":"t=(\d+)"')
JSON = {"Content-Type": "application/json"}


def percentile(values, fraction):
    """The value below which `fraction` of the sorted `values` lie (nan when empty)."""
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(len(values) * fraction))]


# --- Runners ------------------------------------------------------------------------------

class Runner:
    """One runner process: `slots` child tasks kept running under its own parents (those
    whose number is `index` modulo the runners), `rate` progress updates per second over
    one keep-alive connection, paced against the clock. A parent (`pipeline-K.G`, a
    pipeline's run) takes `children_per_parent` children, then the next run of its
    pipeline (`pipeline-K.G+1`) takes the following ones and it finishes with its last
    child; 0 keeps every parent running for ever."""

    def __init__(self, index, port, slots, rate, pipelines, children_per_parent, stall_timeout, seed):
        self.index, self.port, self.rate = index, port, rate
        self.children_per_parent, self.stall_timeout = children_per_parent, stall_timeout
        self.random = random.Random(seed)
        self.api = http.client.HTTPConnection("127.0.0.1", port)
        self.counter = 0
        self.stats = self.fresh_stats()
        self.parents = [self.start_parent(number, 0) for number in pipelines]
        self.slots = [self.register() for _ in range(slots)]

    @staticmethod
    def fresh_stats():
        return {"updates": 0, "latencies": [], "registered": 0, "finished": 0, "deleted": 0,
                "silenced": 0, "recovered": 0, "gave_up": 0, "errors": 0, "parents_finished": 0}

    def call(self, method, path, body=None):
        """One request; returns its status (0 when the connection failed, then reopened)."""
        try:
            self.api.request(method, path, body=body, headers=JSON if body else {})
            response = self.api.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            self.api.close()
            self.api = http.client.HTTPConnection("127.0.0.1", self.port)
            self.stats["errors"] += 1
            return 0
        if not 200 <= response.status < 300:
            self.stats["errors"] += 1
        return response.status

    def start_parent(self, number, run):
        """Registers run `run` of pipeline `number`."""
        parent_id = f"pipeline-{number}.{run}"
        self.call("POST", "/v1/tasks", f'{{"id":"{parent_id}","name":"Pipeline {number}, run {run}",'
                                       f'"stall_timeout_seconds":600}}')
        # The first runs take from 1 to all their children, so the pipelines' runs (and the
        # subscribers moving between them) do not all end at once.
        limit = 1 + number % self.children_per_parent if run == 0 and self.children_per_parent else self.children_per_parent
        return {"id": parent_id, "number": number, "run": run, "limit": limit, "children": 0, "unfinished": 0,
                "closed": False}

    def register(self):
        """Registers the next child under one of this runner's parents and plans its life:
        its total and, for a few, a silence past the stall timeout halfway through."""
        self.counter += 1
        position = self.counter % len(self.parents)
        parent = self.parents[position]
        parent["children"] += 1
        parent["unfinished"] += 1
        if self.children_per_parent and parent["children"] >= parent["limit"]:
            parent["closed"] = True  # it finishes with its last child
            self.parents[position] = self.start_parent(parent["number"], parent["run"] + 1)
        task_id = f"r{self.index}-{self.counter}"
        total = self.random.randint(25, 75)
        self.call("POST", "/v1/tasks", f'{{"id":"{task_id}","name":"Soak job {task_id}","total":{total},'
                                       f'"unit":"files","parent_id":"{parent["id"]}"}}')
        self.stats["registered"] += 1
        silence = None
        if self.random.random() < 0.04:
            silence = {"at": total // 2, "recover": self.random.random() < 0.5, "until": None}
        return {"id": task_id, "parent": parent, "completed": 0, "total": total, "silence": silence}

    def finish(self, slot, outcome):
        self.call("POST", f"/v1/tasks/{slot['id']}/finish", f'{{"outcome":"{outcome}"}}')
        self.stats["finished"] += 1
        parent = slot["parent"]
        parent["unfinished"] -= 1
        if parent["closed"] and parent["unfinished"] == 0:
            self.call("POST", f"/v1/tasks/{parent['id']}/finish", '{"outcome":"succeeded"}')
            self.stats["parents_finished"] += 1
        if self.random.random() < 0.02:
            self.call("DELETE", f"/v1/tasks/{slot['id']}")
            self.stats["deleted"] += 1

    def turn(self, position):
        """The next signal of the task in slot `position`: a stamped increment, or nothing
        while it is silent; a finished task is replaced by a new one."""
        slot = self.slots[position]
        silence = slot["silence"]
        if silence and slot["completed"] == silence["at"]:
            now = time.monotonic()
            if silence["until"] is None:
                silence["until"] = now + self.stall_timeout + 3
                self.stats["silenced"] += 1
            if now < silence["until"]:
                return False
            slot["silence"] = None
            if not silence["recover"]:
                self.stats["gave_up"] += 1
                self.finish(slot, "failed")
                self.slots[position] = self.register()
                return False
            self.stats["recovered"] += 1
        started = time.perf_counter()
        self.call("POST", f"/v1/tasks/{slot['id']}/progress", servers.body(stamp_ns=time.time_ns()))
        self.stats["latencies"].append((time.perf_counter() - started) * 1000)
        self.stats["updates"] += 1
        slot["completed"] += 1
        if slot["completed"] >= slot["total"]:
            self.finish(slot, "succeeded" if self.random.random() < 0.95 else "failed")
            self.slots[position] = self.register()
        return True

    def run(self, control):
        """Paced updates until told to stop; answers each "sample" with its figures since
        the last one. Falling behind, it skips ahead instead of catching up in a burst."""
        next_time, position = time.monotonic(), 0
        while True:
            if control.poll():
                if control.recv() == "stop":
                    return
                control.send(self.stats)
                self.stats = self.fresh_stats()
            for _ in range(len(self.slots)):  # one update, skipping silent tasks
                position = (position + 1) % len(self.slots)
                if self.turn(position):
                    break
            next_time += 1.0 / self.rate
            delay = next_time - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1:
                next_time = time.monotonic()


def run_runner(control, *arguments):
    runner = Runner(*arguments)
    control.send("ready")
    runner.run(control)


# --- Subscribers --------------------------------------------------------------------------

class Subscribers:
    """Event streams on one epoll loop that stay connected: each counts its events, keeps
    its last event id and reopens with Last-Event-ID when the server closes it. Unlike
    servers.Subscribers (a fixed set for a short measurement) they run for hours, with a
    filter each, and report figures per sample."""

    def __init__(self, port, pipelines, probes):
        self.port, self.selector = port, selectors.EpollSelector()
        self.streams = [{"pipeline": pipeline, "run": 0, "probe": probe, "last_id": None, "sock": None}
                        for pipeline, probe in zip(pipelines, probes)]
        self.stats = self.fresh_stats()
        for first in range(0, len(self.streams), 200):
            for stream in self.streams[first:first + 200]:
                self.open(stream)
            self.pump(0.05)

    @staticmethod
    def fresh_stats():
        return {"events": 0, "bytes": 0, "latencies": [], "reconnects": 0, "refused": 0, "moves": 0}

    @staticmethod
    def path(stream):
        """Every task for a dashboard (no pipeline); else a run of a pipeline and its children."""
        if stream["pipeline"] is None:
            return "/v1/events"
        parent = f"pipeline-{stream['pipeline']}.{stream['run']}"
        return f"/v1/events?task={parent}&parent_id={parent}"

    def open(self, stream):
        """Opens `stream`'s connection (resuming after its last event id)."""
        resume = f"Last-Event-ID: {stream['last_id']}\r\n" if stream["last_id"] else ""
        try:
            sock = socket.create_connection(("127.0.0.1", self.port))
            sock.sendall(f"GET {self.path(stream)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         f"Accept: text/event-stream\r\n{resume}\r\n".encode())
        except OSError:
            stream["sock"] = None
            return
        sock.setblocking(False)
        stream.update(sock=sock, head=True, buffer=b"",
                      finished_marker=f'event: task.finished\ndata: {{"id":"pipeline-{stream["pipeline"]}.{stream["run"]}"'
                      .encode())
        self.selector.register(sock, selectors.EVENT_READ, stream)

    def close(self, stream):
        self.selector.unregister(stream["sock"])
        stream["sock"].close()
        stream["sock"] = None

    @property
    def connected(self):
        return sum(1 for stream in self.streams if stream["sock"] is not None and not stream["head"])

    def reopen_closed(self):
        for stream in self.streams:
            if stream["sock"] is None:
                self.stats["reconnects"] += 1
                self.open(stream)

    def pump(self, timeout):
        for key, _ in self.selector.select(timeout):
            stream = key.data
            try:
                chunk = stream["sock"].recv(262144)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self.close(stream)
                continue
            received = time.time_ns()
            self.stats["bytes"] += len(chunk)
            data = stream["buffer"] + chunk
            if stream["head"]:
                if b"\r\n\r\n" not in data:
                    stream["buffer"] = data
                    continue
                head, data = data.split(b"\r\n\r\n", 1)
                if b" 200 " not in head.split(b"\r\n", 1)[0]:
                    self.stats["refused"] += 1
                    self.close(stream)
                    continue
                stream["head"] = False
            end = data.rfind(b"\n\n")
            if end < 0:
                stream["buffer"] = data[-65536:]
                continue
            complete, stream["buffer"] = data[:end + 2], data[end + 2:]
            self.stats["events"] += complete.count(b"\nevent: ")
            last = complete.rfind(b"\nid: ")
            if last >= 0:
                stream["last_id"] = complete[last + 5:complete.index(b"\n", last + 5)].decode()
            if stream["probe"]:
                for match in UPDATE_STAMP.finditer(complete):
                    self.stats["latencies"].append((received - int(match.group(1))) / 1e6)
            if stream["pipeline"] is not None and stream["finished_marker"] in complete:
                # The run followed has finished: follow the next run of the pipeline.
                self.close(stream)
                stream.update(run=stream["run"] + 1, last_id=None)
                self.stats["moves"] += 1
                self.open(stream)

    def run(self, control):
        """Reads until told to stop; answers each "sample" with its figures since the last."""
        last_reopen = time.monotonic()
        while True:
            self.pump(0.05)
            if time.monotonic() - last_reopen > 1:
                self.reopen_closed()
                last_reopen = time.monotonic()
            if control.poll():
                if control.recv() == "stop":
                    return
                latencies = sorted(self.stats.pop("latencies"))
                control.send(dict(self.stats, connected=self.connected,
                                  delivery_p50_ms=percentile(latencies, 0.5),
                                  delivery_p99_ms=percentile(latencies, 0.99)))
                self.stats = self.fresh_stats()


def run_subscribers(control, port, pipelines, probes):
    Subscribers(port, pipelines, probes).run(control)


# --- Samples of the daemon ----------------------------------------------------------------

def proc_status(pid):
    """VmRSS and VmHWM of `pid`, in KiB."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                values[line.split(":")[0]] = int(line.split()[1])
    return values.get("VmRSS", 0), values.get("VmHWM", 0)


def file_size(path):
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def scrape(server):
    """The metrics the soak follows, from GET /metrics (series without labels, and sums of
    those with labels), and total_size from GET /v1/tasks."""
    api = servers.connection(server)
    api.request("GET", "/metrics")
    text = api.getresponse().read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            name = name.split("{")[0]
            values[name] = values.get(name, 0.0) + float(value)
    api.request("GET", "/v1/tasks?page_size=1")
    listing = api.getresponse().read().decode()
    api.close()
    total = re.search(r'"total_size":(\d+)', listing)
    values["total_size"] = int(total.group(1)) if total else -1
    return values


# --- The run ------------------------------------------------------------------------------

# Each measure: CSV column, plot title and unit, and whether growth would be a leak.
MEASURES = [
    ("rss_mib", "RSS", "MiB"), ("hwm_mib", "VmHWM (peak RSS)", "MiB"), ("open_fds", "open files", "fds"),
    ("db_mib", "database file", "MiB"), ("wal_mib", "WAL file", "MiB"),
    ("update_p50_ms", "progress latency p50", "ms"), ("update_p99_ms", "progress latency p99", "ms"),
    ("delivery_p50_ms", "publish-to-receive p50", "ms"), ("delivery_p99_ms", "publish-to-receive p99", "ms"),
    ("updates_per_s", "progress updates", "/s"), ("events_per_s", "events received", "/s"),
    ("tasks_stored", "tasks stored", "tasks"), ("pruned_rows", "rows pruned by retention (total)", "rows"),
    ("subscribers", "subscribers connected", ""), ("daemon_cpu_pct", "daemon CPU", "% of a core"),
]
PANELS = [("rss_mib", "hwm_mib"), ("open_fds",), ("db_mib", "wal_mib"), ("update_p50_ms", "update_p99_ms"),
          ("delivery_p50_ms", "delivery_p99_ms"), ("updates_per_s",), ("events_per_s",), ("tasks_stored",),
          ("pruned_rows",), ("subscribers",), ("daemon_cpu_pct",), ("load_1m",)]
# Measures that must stay flat: growth in one of them is a leak or a slowdown.
WATCHED = ["rss_mib", "hwm_mib", "open_fds", "db_mib", "wal_mib", "update_p50_ms", "update_p99_ms",
           "delivery_p50_ms", "delivery_p99_ms", "tasks_stored", "events_per_s", "updates_per_s"]


def verdict(rows, warm_up_minutes):
    """Per watched measure, over the samples after the warm-up (while the first finished
    tasks age into retention, stored tasks and the database file are still filling): the
    medians of the first and last thirds, the least-squares slope per hour, and the noise
    (median absolute deviation from that straight line). A measure is flagged when the last third's
    median moved past the first's by more than 10% and by more than three times the noise,
    and told apart: still rising over the last third (GROWS), or a step up to a plateau;
    a short run's slope, extrapolated to an hour, is mostly noise and only shown."""
    steady_rows = [row for row in rows if row["minute"] > warm_up_minutes]
    if len(steady_rows) < 3:
        return [f"too few samples after the warm-up ({warm_up_minutes:.1f} min) for a verdict: "
                f"run longer (these are the figures over every sample)"] + verdict(rows, -1)[1:]
    third = max(1, len(steady_rows) // 3)
    lines = [f"{len(steady_rows)} samples after a warm-up of {warm_up_minutes:.1f} min"]
    for column in WATCHED:
        values = [(row["minute"], row[column]) for row in steady_rows if row[column] == row[column]]  # no nan
        if len(values) < 3:
            lines.append(f"{column:<16} too few samples")
            continue
        first = statistics.median(v for _, v in values[:third])
        last = statistics.median(v for _, v in values[-third:])
        xs, ys = [m for m, _ in values], [v for _, v in values]
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        spread = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread if spread else 0.0
        slope_per_hour = 60 * slope
        noise = statistics.median(abs(y - mean_y - slope * (x - mean_x)) for x, y in zip(xs, ys))
        moved = last - first
        significant = abs(moved) > 0.10 * abs(first) and abs(moved) > 3 * noise
        # Over the last third alone: still rising at the end (a leak), or a step to a plateau
        # (a high-water mark, such as a WAL file that SQLite reuses and never shrinks)?
        tail = values[-third:]
        rise_at_end = tail[-1][1] - tail[0][1] if len(tail) >= 2 else 0.0
        still_rising = rise_at_end > max(3 * noise, 0.02 * abs(last))
        if column in ("updates_per_s", "events_per_s"):
            flag = "DROPS" if significant and moved < 0 else "steady"
        elif significant and moved > 0:
            flag = "GROWS" if still_rising else "rose, then flat over the last third"
        else:
            flag = "flat"
        change = 100 * moved / first if first else 0.0
        lines.append(f"{column:<16} first third {first:10.2f}  last third {last:10.2f}  ({change:+6.1f}%)  "
                     f"noise ±{noise:.2f}  slope {slope_per_hour:+.2f}/h  {flag}")
    return lines


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot
    units = {column: (name, unit) for column, name, unit in MEASURES}
    units["load_1m"] = ("machine load average (1 min)", "")
    columns = 3
    figure, axes = pyplot.subplots((len(PANELS) + columns - 1) // columns, columns, figsize=(15, 13), sharex=True)
    minutes = [row["minute"] for row in rows]
    for axis, panel in zip(axes.flat, PANELS):
        for column in panel:
            axis.plot(minutes, [row[column] for row in rows], marker=".", label=units[column][0])
        name, unit = units[panel[0]]
        axis.set_title(" / ".join(units[c][0] for c in panel) if len(panel) > 1 else name, fontsize=10)
        axis.set_ylabel(unit)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        if len(panel) > 1:
            axis.legend(fontsize=8, loc="lower right")
    for axis in axes.flat[len(PANELS):]:
        axis.set_visible(False)
    for axis in axes[-1]:
        axis.set_xlabel("minutes")
    figure.suptitle(textwrap.fill(title, 150), fontsize=11)
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    figure.savefig(path, dpi=80)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--sample-seconds", type=float, default=60)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--dashboards", type=int, default=10, help="subscribers that follow every task")
    parser.add_argument("--runners", type=int, default=4, help="runner processes")
    parser.add_argument("--rate", type=float, default=2000, help="progress updates per second, in all")
    parser.add_argument("--tasks", type=int, default=400, help="child tasks running at once")
    parser.add_argument("--parents", type=int, default=100, help="pipelines: parent tasks running at once")
    parser.add_argument("--children-per-parent", type=int, default=20,
                        help="children of one run of a pipeline; 0: parents never finish")
    parser.add_argument("--retention", default="60s")
    parser.add_argument("--stall-timeout", type=float, default=5)
    parser.add_argument("--durability", default="full")
    parser.add_argument("--headwayd", default=servers.HEADWAYD)
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "headway-soak"),
                        help="writes OUT.csv and OUT.png (`make soak`: docs/soak)")
    args = parser.parse_args()
    retention = re.fullmatch(r"(\d+)([smhd]?)", args.retention)
    if not retention:
        parser.error("--retention: seconds, or with s, m, h or d (e.g. 60s)")
    retention_seconds = int(retention.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[retention.group(2)]
    # Stored tasks fill until the first runs of the pipelines have finished (a child is kept
    # while its parent runs; a run lasts about its children's updates over its share of the
    # rate, 50 updates each on average), aged past the retention and been pruned (every 30 s):
    # twice that, for a rate the runners fall short of on a busy machine.
    run_seconds = args.children_per_parent * 50 * args.parents / args.rate
    warm_up_minutes = (retention_seconds + 30 + 2 * run_seconds) / 60
    servers.HEADWAYD = args.headwayd
    servers.pin_this_process_to_cpu1()
    commit = subprocess.run(["git", "-C", servers.ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"soak: {args.minutes:g} min, a sample every {args.sample_seconds:g} s; {args.subscribers} subscribers "
          f"({args.dashboards} of every task), {args.runners} runners, {args.rate:g} updates/s over "
          f"{args.tasks} tasks under {args.parents} parents; --retention {args.retention} "
          f"--stall-timeout {args.stall_timeout:g} --durability {args.durability}; {args.headwayd} ({commit})",
          flush=True)

    server = servers.Headway(args.durability, extra=("--retention", args.retention,
                                                     "--stall-timeout", str(args.stall_timeout)))
    context = multiprocessing.get_context("fork")
    workers = []
    try:
        if args.parents < args.runners:
            parser.error("--parents must be at least --runners (each runner has its own pipelines)")
        for index in range(args.runners):
            control, theirs = context.Pipe()
            process = context.Process(target=run_runner, daemon=True, args=(
                theirs, index, server.port, max(1, args.tasks // args.runners), args.rate / args.runners,
                list(range(index, args.parents, args.runners)), args.children_per_parent, args.stall_timeout, index))
            process.start()
            workers.append((process, control))
        for worker, control in workers:  # every first run of a pipeline is registered
            control.recv()
        pipelines = [None if index < args.dashboards else index % args.parents for index in range(args.subscribers)]
        probes = [pipeline is not None and index % 10 == 1 for index, pipeline in enumerate(pipelines)]
        control, theirs = context.Pipe()
        process = context.Process(target=run_subscribers, args=(theirs, server.port, pipelines, probes), daemon=True)
        process.start()
        workers.insert(0, (process, control))

        csv_path, png_path = f"{args.out}.csv", f"{args.out}.png"
        columns = ["minute", "rss_mib", "hwm_mib", "open_fds", "db_mib", "wal_mib", "update_p50_ms", "update_p99_ms",
                   "delivery_p50_ms", "delivery_p99_ms", "updates_per_s", "events_per_s", "tasks_stored",
                   "pruned_rows", "subscribers", "reconnects", "refused", "moves", "cut_off", "coalesced", "errors",
                   "registered", "finished", "deleted", "silenced", "recovered", "gave_up", "stalled_now",
                   "parents_finished", "daemon_cpu_pct", "load_1m"]
        rows = []
        started = time.monotonic()
        cpu_before, last_sample = servers.cpu_seconds(server.pid), started
        for worker, control in workers:  # discard what the start-up took
            control.send("sample")
        for worker, control in workers:
            control.recv()
        with open(csv_path, "w") as csv:
            csv.write(",".join(columns) + "\n")
            samples = max(1, round(args.minutes * 60 / args.sample_seconds))
            for sample in range(1, samples + 1):
                time.sleep(max(0.0, started + sample * args.sample_seconds - time.monotonic()))
                for worker, control in workers:
                    control.send("sample")
                figures = [control.recv() for worker, control in workers]
                now, cpu_now = time.monotonic(), servers.cpu_seconds(server.pid)
                elapsed = now - last_sample
                watching, runners = figures[0], figures[1:]
                latencies = sorted(l for figure in runners for l in figure["latencies"])
                rss, hwm = proc_status(server.pid)
                metrics = scrape(server)
                row = {
                    "minute": (now - started) / 60, "rss_mib": rss / 1024, "hwm_mib": hwm / 1024,
                    "open_fds": len(os.listdir(f"/proc/{server.pid}/fd")),
                    "db_mib": file_size(f"{server.work}/h.db") / 2**20,
                    "wal_mib": file_size(f"{server.work}/h.db-wal") / 2**20,
                    "update_p50_ms": percentile(latencies, 0.5), "update_p99_ms": percentile(latencies, 0.99),
                    "delivery_p50_ms": watching["delivery_p50_ms"], "delivery_p99_ms": watching["delivery_p99_ms"],
                    "updates_per_s": sum(f["updates"] for f in runners) / elapsed,
                    "events_per_s": watching["events"] / elapsed,
                    "tasks_stored": metrics["total_size"],
                    "pruned_rows": metrics.get("headway_retention_pruned_rows_total", 0),
                    "subscribers": watching["connected"], "reconnects": watching["reconnects"],
                    "refused": watching["refused"], "moves": watching["moves"],
                    "cut_off": metrics.get("headway_event_subscribers_cut_off_total", 0),
                    "coalesced": metrics.get("headway_events_coalesced_total", 0),
                    "errors": sum(f["errors"] for f in runners),
                    "registered": sum(f["registered"] for f in runners),
                    "finished": sum(f["finished"] for f in runners),
                    "deleted": sum(f["deleted"] for f in runners),
                    "silenced": sum(f["silenced"] for f in runners),
                    "recovered": sum(f["recovered"] for f in runners),
                    "gave_up": sum(f["gave_up"] for f in runners),
                    "parents_finished": sum(f["parents_finished"] for f in runners),
                    "stalled_now": metrics.get("headway_tasks_stalled", 0),
                    "daemon_cpu_pct": 100 * (cpu_now - cpu_before) / elapsed, "load_1m": os.getloadavg()[0],
                }
                cpu_before, last_sample = cpu_now, now
                rows.append(row)
                csv.write(",".join(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c])
                                   for c in columns) + "\n")
                csv.flush()
                print(f"{row['minute']:6.1f} min  RSS {row['rss_mib']:6.1f} MiB (peak {row['hwm_mib']:6.1f})  "
                      f"fds {row['open_fds']:5d}  db {row['db_mib']:6.1f} MiB  WAL {row['wal_mib']:6.1f} MiB  "
                      f"update p50/p99 {row['update_p50_ms']:5.2f}/{row['update_p99_ms']:6.2f} ms  "
                      f"delivery p50/p99 {row['delivery_p50_ms']:6.1f}/{row['delivery_p99_ms']:6.1f} ms  "
                      f"{row['updates_per_s']:6.0f} updates/s  {row['events_per_s']:7.0f} events/s  "
                      f"tasks {row['tasks_stored']:6d}  pruned {row['pruned_rows']:7.0f}  "
                      f"subs {row['subscribers']} ({row['moves']} moved, {row['reconnects']} reopened)  stalled {row['stalled_now']:.0f}  "
                      f"errors {row['errors']}  CPU {row['daemon_cpu_pct']:3.0f}%  load {row['load_1m']:.1f}",
                      flush=True)
    finally:
        for worker, control in workers:
            try:
                control.send("stop")
            except OSError:
                pass
        for worker, control in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
        server.stop()

    day = datetime.date.today().isoformat()
    plot(rows, png_path, f"headwayd soak {day} (bench/soak.py at {commit}): {args.subscribers} subscribers, "
                         f"{args.rate:g} updates/s aimed at over {args.tasks} tasks, --retention {args.retention}, "
                         f"--stall-timeout {args.stall_timeout:g}, --durability {args.durability}, "
                         f"a sample every {args.sample_seconds:g} s")
    print(f"wrote {csv_path} and {png_path}")
    print("verdict (first third against last third of the samples after the warm-up):")
    for line in verdict(rows, warm_up_minutes):
        print("  " + line)


if __name__ == "__main__":
    main()
