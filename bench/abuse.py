#!/usr/bin/env python3
"""Hostile clients against a daemon serving honest runners and subscribers.

Each phase runs on its own fresh release headwayd (pinned to CPU 0, a temporary database,
`--durability normal` unless told otherwise), so nothing one attack leaves behind (8,000
big tasks, a deep chain, held sockets) slows the next. A phase is:

  setup     what the attack needs (e.g. 8,000 tasks with 4 KB metadata)
  honest    8 keep-alive runners each posting a progress update RATE times a second to its
            own task, 20 SSE subscribers of those tasks, and a probe that opens a new
            subscriber every second and times its snapshot; all run until the phase ends
  quiet     SECONDS of honest load alone: the baseline
  attack    SECONDS at least (until the attack's script is done, at most TIMEBOX): the
            attack runs in a child process (nice 10, so the honest clients keep CPU 1)

A runner's latency is measured from the moment it meant to send (a fixed schedule, as wrk2
does), so a stalled daemon shows in the percentiles however few requests it let through.
A subscriber's delivery delay is receipt time minus the send time stamped in the label.
The daemon's RSS (VmRSS) and CPU (utime+stime) are sampled every 100 ms.

A phase whose setup makes tokens (token-storm) has every honest client present one.

A phase PASSES when, during the attack, the daemon stays alive, the honest clients see no
error, their request p99 and event delivery p99 stay within 2x of the quiet baseline of
the same daemon, and the peak RSS stays within 2x the quiet peak + 200 MB. The `quiet`
phase runs no attack: its ratios show how much two quiet windows differ on this machine.

    bench/abuse.py [--seconds 10] [--phases quiet,slow-readers,...] [--json PATH]
"""
import argparse
import http.client
import json
import multiprocessing
import os
import re
import selectors
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402

JSON = {"Content-Type": "application/json"}
ALL_EVENTS = b"GET /v1/events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n"


def percentile(values, fraction):
    """The nearest-rank percentile of `values` (None when there are none)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(round(fraction * len(ordered))) - 1))]


def process_cpu_seconds(pid):
    """utime + stime of the whole process from /proc/PID/stat: unlike per-thread schedstat
    (servers.cpu_seconds), it keeps the time of threads that have already exited."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def big_metadata(number):
    """About 4 KB of task metadata (the limit is 4096 bytes as compact JSON)."""
    return {"n": number, "blob": "m" * 4000}


def post(api, path, document=None, token=None):
    """POSTs JSON on a keep-alive connection (with `token` as its bearer, if given);
    returns (status, parsed body or None)."""
    api.request("POST", path, body=json.dumps(document or {}),
                headers=dict(JSON, Authorization=f"Bearer {token}") if token else JSON)
    response = api.getresponse()
    data = response.read()
    try:
        return response.status, json.loads(data) if data else None
    except ValueError:
        return response.status, None


def register_tasks(port, documents, connections=8, token=None):
    """Registers every task document over `connections` keep-alive connections."""
    failures = []

    def worker(part):
        api = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for document in part:
            status, _ = post(api, "/v1/tasks", document, token)
            if status not in (200, 201):
                failures.append((document.get("id"), status))
        api.close()

    threads = [threading.Thread(target=worker, args=(documents[i::connections],)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} registrations refused, first {failures[0]}")


def events_request(tasks, token=None):
    """The head of a subscription to `tasks` (with `token` as its bearer, if given)."""
    query = "&".join(f"task={task}" for task in tasks)
    authorization = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"GET /v1/events?{query} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
            f"{authorization}\r\n").encode()


# --- the honest load -------------------------------------------------------------------

class HonestLoad:
    """Runners, subscribers, a snapshot probe and a sampler of the daemon, each a thread;
    with `token` (once tokens exist), each presents it; with `heartbeat_token`, a probe
    also sends a heartbeat every 50 ms with that token and times it."""

    def __init__(self, server, runners, rate, subscribers, token=None, heartbeat_token=None):
        self.server, self.rate, self.token, self.heartbeat_token = server, rate, token, heartbeat_token
        self.tasks = [f"honest-{i}" for i in range(runners)]
        register_tasks(server.port, [{"id": t, "name": f"Honest {t}"} for t in self.tasks], token=token)
        self.stopping = threading.Event()
        self.requests = []   # (finished at, latency ms, error or None)
        self.probes = []     # (finished at, snapshot wait ms, error or None)
        self.heartbeats = []  # (finished at, latency ms, error or None)
        self.waiting = {}    # runner or probe: since when its request is unanswered
        self.samples = []    # (at, RSS KiB, CPU seconds); RSS None once the process is gone
        self.subscribers = servers.Subscribers(server.port, subscribers, events_request(self.tasks, token))
        self.threads = [threading.Thread(target=self._run, args=(task,)) for task in self.tasks]
        self.threads += [threading.Thread(target=self._pump), threading.Thread(target=self._probe),
                         threading.Thread(target=self._sample)]
        if heartbeat_token:
            self.threads.append(threading.Thread(target=self._heartbeat))
        for thread in self.threads:
            thread.start()

    def _run(self, task):
        """One runner: an update every 1/rate s on one keep-alive connection."""
        api, slot, path = None, time.monotonic(), f"/v1/tasks/{task}/progress"
        while not self.stopping.is_set():
            slot += 1.0 / self.rate
            if self.stopping.wait(max(0.0, slot - time.monotonic())):
                break
            self.waiting[task] = slot
            api, error = self._post(api, path, {"increment": 1, "label": f"t={time.time_ns()}", "unit": "files"},
                                    self.token)
            done = time.monotonic()
            self.requests.append((done, (done - slot) * 1000, error))
            del self.waiting[task]
            if error:
                self.stopping.wait(0.05)  # do not spin on a dead daemon

    def _post(self, api, path, document, token):
        """POSTs on the keep-alive connection `api` (made when None): (the connection to use
        next, None after a failure; the error, or None)."""
        try:
            api = api or http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
            status, _ = post(api, path, document, token)
            return api, None if 200 <= status < 300 else f"HTTP {status}"
        except (OSError, http.client.HTTPException) as failure:
            if api is not None:
                api.close()
            return None, type(failure).__name__

    def _pump(self):
        while not self.stopping.is_set():
            self.subscribers.pump(0.05)

    def _probe(self):
        """A new subscriber every second: how long until its snapshot has arrived."""
        while not self.stopping.wait(1.0):
            started, error = time.monotonic(), None
            self.waiting["probe"] = started
            try:
                with socket.create_connection(("127.0.0.1", self.server.port), timeout=15) as sock:
                    sock.sendall(events_request(self.tasks, self.token))
                    data = b""
                    # The stream is chunked: the snapshot is whole once a blank line follows it.
                    while b"\n\n" not in data.partition(b"event: snapshot")[2]:
                        chunk = sock.recv(65536)
                        if not chunk:
                            raise ConnectionError("closed before the snapshot")
                        data += chunk
            except OSError as failure:
                error = type(failure).__name__
            done = time.monotonic()
            self.probes.append((done, (done - started) * 1000, error))
            del self.waiting["probe"]

    def _heartbeat(self):
        """A heartbeat of the first task every 50 ms, on one keep-alive connection: how long
        one write waits behind whatever else the writer does."""
        api, path = None, f"/v1/tasks/{self.tasks[0]}/heartbeat"
        while not self.stopping.wait(0.05):
            started = time.monotonic()
            api, error = self._post(api, path, None, self.heartbeat_token)
            done = time.monotonic()
            self.heartbeats.append((done, (done - started) * 1000, error))

    def _sample(self):
        pid = self.server.pid
        while not self.stopping.wait(0.1):
            try:
                self.samples.append((time.monotonic(), servers.rss_kib(pid), process_cpu_seconds(pid)))
            except (OSError, ValueError, IndexError):
                self.samples.append((time.monotonic(), None, None))

    def mark(self):
        """A point in time the figures can be split at."""
        states = self.subscribers.states
        now = time.monotonic()
        return {"at": now, "events": [len(s["latencies"]) for s in states],
                "waiting": {who: (now - since) * 1000 for who, since in list(self.waiting.items())},
                "closed": len(states) - len(self.subscribers.selector.get_map())}

    def window(self, start, end, unanswered=False):
        """The honest clients' figures and the daemon's between two marks; with `unanswered`,
        a request or probe still waiting at the end counts with its wait so far (the last
        window, which no later one would otherwise see)."""
        waiting = end["waiting"] if unanswered else {}
        requests = [r for r in self.requests if start["at"] <= r[0] < end["at"]]
        probes = [p for p in self.probes if start["at"] <= p[0] < end["at"]]
        heartbeats = [h for h in self.heartbeats if start["at"] <= h[0] < end["at"]]
        delays = [d for s, a, b in zip(self.subscribers.states, start["events"], end["events"])
                  for d in s["latencies"][a:b]]
        samples = [s for s in self.samples if start["at"] <= s[0] <= end["at"] and s[1] is not None]
        cpu = None
        if len(samples) >= 2:
            cpu = 100 * (samples[-1][2] - samples[0][2]) / (samples[-1][0] - samples[0][0])
        errors = {}
        for _, _, error in requests + probes + heartbeats:
            if error:
                errors[error] = errors.get(error, 0) + 1
        if end["closed"] > start["closed"]:
            errors["stream closed"] = end["closed"] - start["closed"]
        latencies = [r[1] for r in requests] + [ms for who, ms in waiting.items() if who != "probe"]
        return {
            "seconds": end["at"] - start["at"], "requests": len(requests),
            "p50_ms": percentile(latencies, 0.50), "p99_ms": percentile(latencies, 0.99),
            "events": len(delays), "event_p99_ms": percentile(delays, 0.99),
            "snapshot_max_ms": max([p[1] for p in probes] + ([waiting["probe"]] if "probe" in waiting else []),
                                   default=None),
            "unanswered_at_end": len(waiting),
            "heartbeat_p50_ms": percentile([h[1] for h in heartbeats], 0.50),
            "heartbeat_p99_ms": percentile([h[1] for h in heartbeats], 0.99),
            "heartbeat_max_ms": max((h[1] for h in heartbeats), default=None),
            "rss_peak_mib": max((s[1] for s in samples), default=0) / 1024, "cpu_percent": cpu,
            "errors": errors,
        }

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=40)
        self.subscribers.close()


# --- the attacks: each runs in a child process until `stop`, sets `done` when its ---------
# --- scripted part is over, and puts one line of notes for the report ---------------------

# The attackers' own address: the honest clients come from 127.0.0.1, the attacks from
# another loopback address, as they would from another machine (a cap per client address
# must not make the honest clients pay for the attacker).
ATTACKER_ADDRESS = "127.0.0.2"


def connect(port, timeout=2.0, receive_buffer=None):
    """A socket to the daemon from the attackers' address."""
    sock = socket.socket()
    sock.bind((ATTACKER_ADDRESS, 0))
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(timeout)
    sock.connect(("127.0.0.1", port))
    return sock


def closed_by_server(socks):
    """How many of `socks` the server has closed (EOF or reset, nothing unread before it)."""
    closed = 0
    for sock in socks:
        sock.setblocking(False)  # a socket with a timeout would wait for bytes before peeking
        try:
            closed += sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return closed


def hold_connections(port, count, first_bytes, stop, done, notes, timebox):
    """Opens up to `count` connections, sends each `first_bytes` (maybe none), holds them."""
    socks, failures, consecutive = [], {}, 0
    try:
        while len(socks) < count and consecutive < 50 and not stop.is_set():
            try:
                sock = connect(port)
                if first_bytes:
                    sock.sendall(first_bytes)
                socks.append(sock)
                consecutive = 0
            except OSError as failure:
                failures[type(failure).__name__] = failures.get(type(failure).__name__, 0) + 1
                consecutive += 1
        done.set()
        stop.wait(timebox)
        notes.put(f"opened {len(socks)} of {count} (failed: {failures or 'none'}); "
                  f"closed by the server by the end: {closed_by_server(socks)}")
    finally:
        for sock in socks:
            sock.close()


def quiet(port, options, stop, done, notes):
    """No attack: a second quiet window, to show the noise between two quiet windows."""
    done.set()
    notes.put("no attack")


def slow_readers(port, options, stop, done, notes):
    """Event streams of every task over a 4 KiB receive buffer, never read."""
    socks = []
    try:
        for _ in range(options["slow_readers"]):
            sock = connect(port, timeout=5, receive_buffer=4096)
            sock.sendall(ALL_EVENTS)
            socks.append(sock)
        done.set()
        stop.wait(options["timebox"])
        notes.put(f"{len(socks)} streams of all {options['big_tasks']:,} big tasks held, never read")
    finally:
        for sock in socks:
            sock.close()


def half_sent_heads(port, options, stop, done, notes):
    """Connections that send part of a request line and then nothing."""
    hold_connections(port, options["half_heads"], b"GET /v1/tas", stop, done, notes, options["timebox"])


def connection_flood(port, options, stop, done, notes):
    """As many silent connections as this process can open."""
    hold_connections(port, options["flood"], b"", stop, done, notes, options["timebox"])


def slow_bodies(port, options, stop, done, notes):
    """Connections that announce a 64 KiB body and send it a byte a second each, until the
    server closes them (or the time box is nearly over)."""
    head = (b"POST /v1/tasks HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 65536\r\n\r\n{")
    socks, failures = [], {}
    try:
        for _ in range(options["slow_bodies"]):
            try:
                sock = connect(port)
                sock.sendall(head)
                socks.append(sock)
            except OSError as failure:
                failures[type(failure).__name__] = failures.get(type(failure).__name__, 0) + 1
        opened, still_open, last_closed = time.monotonic(), list(socks), None
        while still_open and not stop.is_set() and time.monotonic() - opened < options["timebox"] - 5:
            stop.wait(1.0)
            remaining = []
            for sock in still_open:
                if closed_by_server([sock]):
                    last_closed = time.monotonic() - opened
                    continue
                try:
                    sock.send(b" ")
                    remaining.append(sock)
                except OSError:
                    last_closed = time.monotonic() - opened
            still_open = remaining
        done.set()
        closed = len(socks) - len(still_open)
        notes.put(f"opened {len(socks)} of {options['slow_bodies']} (failed: {failures or 'none'}), a byte a second each; "
                  f"closed by the server: {closed}" + (f", the last after {last_closed:.0f} s" if last_closed else ""))
    finally:
        for sock in socks:
            sock.close()


def deep_tree(port, options, stop, done, notes):
    """A parent chain as deep as allowed, updates of its leaf, then a cancel of its root."""
    api = http.client.HTTPConnection("127.0.0.1", port, timeout=options["timebox"])
    depth, refusal, steps = 0, None, []
    try:
        started = time.monotonic()
        while depth < options["depth_cap"] and not stop.is_set():
            document = {"id": f"deep-{depth}", "name": f"Deep {depth}", "metadata": big_metadata(depth)}
            if depth:
                document["parent_id"] = f"deep-{depth - 1}"
            status, reply = post(api, "/v1/tasks", document)
            if status not in (200, 201):
                refusal = f"{status} {(reply or {}).get('code', '')}".strip()
                break
            depth += 1
        steps.append(f"chain of {depth} in {time.monotonic() - started:.1f} s"
                     f"{f' (next refused: {refusal})' if refusal else ''}")
        leaf, times = f"deep-{depth - 1}", []
        for _ in range(options["leaf_updates"] if depth and not stop.is_set() else 0):
            started = time.monotonic()
            post(api, f"/v1/tasks/{leaf}/progress", {"increment": 1})
            times.append((time.monotonic() - started) * 1000)
        if times:
            steps.append(f"leaf update median {percentile(times, 0.5):.1f} ms")
        if depth and not stop.is_set():
            started = time.monotonic()
            status, _ = post(api, "/v1/tasks/deep-0/cancel")
            steps.append(f"root cancel {status} in {time.monotonic() - started:.2f} s")
        done.set()
        stop.wait(options["timebox"])
    except (OSError, http.client.HTTPException) as failure:
        steps.append(f"stopped by {type(failure).__name__} at depth {depth}")
    finally:
        api.close()
        notes.put("; ".join(steps))


def catch_up_storm(port, options, stop, done, notes):
    """100 subscriptions to one task opened and closed at once, once a second."""
    request, rounds, failures = events_request(["big-0"]), 0, 0
    while rounds < 1000 and not stop.is_set():
        socks = []
        for _ in range(options["storm"]):
            try:
                sock = connect(port)
                sock.sendall(request)
                socks.append(sock)
            except OSError:
                failures += 1
        for sock in socks:
            sock.close()
        rounds += 1
        done.set()
        stop.wait(1.0)
    notes.put(f"{rounds} rounds of {options['storm']} opened and closed ({failures} failed to connect)")


def token_storm(port, options, stop, done, notes):
    """POST /v1/tokens on 4 keep-alive connections, as fast as they go, until --token-storm
    tokens are made: how long one create takes as the tokens pile up (each create once
    read the whole table back in the writer's job and rebuilt the registry under its lock)."""
    lock, made, refused, times = threading.Lock(), [0], {}, []   # times: (tokens made by then, ms)
    issued = [0]

    def worker(index):
        api = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(ATTACKER_ADDRESS, 0))
        try:
            while not stop.is_set():
                with lock:
                    if issued[0] >= options["token_storm"]:
                        return
                    issued[0] += 1
                started = time.monotonic()
                status, reply = post(api, "/v1/tokens", {"name": f"storm-{index}", "scopes": ["read"]}, options["token"])
                elapsed = (time.monotonic() - started) * 1000
                with lock:
                    if status == 201:
                        made[0] += 1
                        times.append((made[0], elapsed))
                    else:
                        code = f"{status} {(reply or {}).get('code', '')}".strip()
                        refused[code] = refused.get(code, 0) + 1
        except (OSError, http.client.HTTPException) as failure:
            with lock:
                refused[type(failure).__name__] = refused.get(type(failure).__name__, 0) + 1
        finally:
            api.close()

    started = time.monotonic()
    workers = [threading.Thread(target=worker, args=(index,)) for index in range(4)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    seconds = time.monotonic() - started
    done.set()
    thousands = []
    for first in range(0, made[0], 1000):
        batch = [ms for count, ms in times if first < count <= first + 1000]
        thousands.append(f"{percentile(batch, 0.5):.1f}")
    last = [ms for count, ms in times if count > made[0] - 100]
    notes.put(f"{made[0]} tokens made in {seconds:.1f} s (4 connections); create median ms per thousand made: "
              f"{' / '.join(thousands) or '—'}; the last 100: median {number(percentile(last, 0.5))}, "
              f"max {number(max(last, default=None))}; refused: {refused or 'none'}")
    stop.wait(options["timebox"])


def admin_and_report_tokens(port, options):
    """The first token (an admin, made while none exists) and a report token for the
    heartbeat probe; every honest client then presents one."""
    api = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    status, admin = post(api, "/v1/tokens", {"name": "bench-admin", "scopes": ["admin"]})
    assert status == 201, status
    options["token"] = admin["secret"]
    status, report = post(api, "/v1/tokens", {"name": "bench-heartbeat", "scopes": ["report"]}, options["token"])
    assert status == 201, status
    options["heartbeat_token"] = report["secret"]
    api.close()


TCP_CLOSE_WAIT, TCP_CLOSE = 8, 7


def stream_ended(sock):
    """Whether the daemon ended a stream whose client reads nothing: its last chunk came
    (`retry:` alone, on a connection kept alive), or it closed the connection (the
    stall timeout; its FIN waits behind the unread bytes, so the TCP state tells)."""
    try:
        waiting = sock.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        waiting = b""
    except OSError:
        return True
    state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
    return waiting.endswith(b"\r\n0\r\n\r\n") or state in (TCP_CLOSE_WAIT, TCP_CLOSE)


def catch_up_lockout(port, options, stop, done, notes):
    """8 streams of all the big tasks, each with its own `min_duration` (0.001 … 0.008 s) so
    that none shares another's catch-up, over a 4 KiB receive buffer and never read; a
    stream the daemon ends (its catch-up refused: `retry:` alone) is opened again at once,
    as an attacker keeps at it. Samples `headway_catch_up_bytes` every 100 ms."""
    paths = [f"/v1/events?min_duration=0.00{n}" for n in range(1, 9)]
    heads = [f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n".encode() for path in paths]
    socks, opened, ended, peak = [None] * len(heads), 0, 0, None
    scrape = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    started = time.monotonic()
    try:
        while not stop.is_set() and time.monotonic() - started < options["lockout_seconds"]:
            for index, head in enumerate(heads):
                sock = socks[index]
                if sock is not None:
                    if not stream_ended(sock):
                        continue  # served (held unread), or still waiting for its catch-up
                    sock.close()
                    ended += 1
                try:
                    socks[index] = connect(port, timeout=5, receive_buffer=4096)
                    socks[index].sendall(head)
                    opened += 1
                except OSError:
                    socks[index] = None
            try:
                scrape.request("GET", "/metrics")
                text = scrape.getresponse().read().decode()
                for line in text.splitlines():
                    if line.startswith("headway_catch_up_bytes "):
                        peak = max(peak or 0, float(line.split()[1]))
            except (OSError, http.client.HTTPException):
                scrape.close()
            stop.wait(0.1)
        done.set()
        peak_text = "n/a (no such metric)" if peak is None else f"{peak / 2**20:.0f} MiB"
        notes.put(f"{opened} streams opened over {time.monotonic() - started:.0f} s, 8 at a time, "
                  f"{ended} ended by the daemon and opened again; peak headway_catch_up_bytes {peak_text}")
        stop.wait(options["timebox"])
    finally:
        scrape.close()
        for sock in socks:
            if sock is not None:
                sock.close()


def first_lines(port, payloads, wait):
    """Sends each payload on its own connection; returns, per payload, the status the
    server answered (or `silence`, `closed`, `reset`) and the seconds it took."""
    selector, outcomes, started = selectors.DefaultSelector(), {}, time.monotonic()
    for index, payload in enumerate(payloads):
        try:
            sock = connect(port)
            sock.sendall(payload)
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, index)
        except OSError as failure:
            outcomes[index] = (type(failure).__name__, 0.0)
    while selector.get_map() and time.monotonic() - started < wait:
        for key, _ in selector.select(0.1):
            try:
                data = key.fileobj.recv(256)
                outcome = data.split(b" ", 2)[1].decode(errors="replace") if data else "closed"
            except OSError:
                outcome = "reset"
            outcomes[key.data] = (outcome, time.monotonic() - started)
            selector.unregister(key.fileobj)
            key.fileobj.close()
    for key in list(selector.get_map().values()):
        outcomes[key.data] = ("silence", wait)
        key.fileobj.close()
    selector.close()
    return [outcomes[i] for i in range(len(payloads))]


def tally(kinds, stop, done, port, wait, concurrent=1):
    """Sends every kind's payload `concurrent` times a round until `stop`; per kind, the
    outcomes seen and the slowest answer."""
    seen = {name: {} for name in kinds}
    slowest = dict.fromkeys(kinds, 0.0)
    for _ in range(200):
        if stop.is_set():
            break
        names = [name for name in kinds for _ in range(concurrent)]
        for name, (outcome, seconds) in zip(names, first_lines(port, [kinds[n] for n in names], wait)):
            seen[name][outcome] = seen[name].get(outcome, 0) + 1
            slowest[name] = max(slowest[name], seconds)
        done.set()
    return "; ".join(f"{name}: {seen[name]} (slowest {slowest[name]:.1f} s)" for name in kinds)


def huge_heads(port, options, stop, done, notes):
    """Heads with 150 query parameters and with 60 `task=` parameters, 10 of each a round."""
    many = "&".join(f"p{i}={i}" for i in range(150))
    kinds = {"150 query params": f"GET /v1/tasks?{many} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode(),
             "60 task= params": events_request([f"task-{i:02d}" for i in range(60)])}
    notes.put(tally(kinds, stop, done, port, wait=5.0, concurrent=10))


HOSTILE = {
    "%00 in path": b"GET /v1/tasks/a%00b HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "raw NUL in path": b"GET /v1/tasks/a\x00b HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "ESC/CR/LF in path": b"GET /v1/tasks/%1b%5b31m%0d%0afake HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "control bytes in a header": b"GET /v1/tasks HTTP/1.1\r\nHost: localhost\r\nX-A: \x01\x1b[2J\x7f\r\n\r\n",
    "bare-LF head /v1/tasks": b"GET /v1/tasks HTTP/1.1\nHost: localhost\n\n",
    "bare-LF head /v1/events": b"GET /v1/events HTTP/1.1\nHost: localhost\nAccept: text/event-stream\n\n",
    "DELETE victim%00%2F..%2Fx": b"DELETE /v1/tasks/victim%00%2F..%2Fx HTTP/1.1\r\nHost: localhost\r\n\r\n",
}


def hostile_bytes(port, options, stop, done, notes):
    """NUL and control characters in targets and headers, bare-LF heads; then whether the
    NUL-truncated DELETE removed the task `victim`."""
    summary = tally(HOSTILE, stop, done, port, wait=12.0)
    try:
        api = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        api.request("GET", "/v1/tasks/victim")
        status = api.getresponse().status
        api.close()
        victim = "still there" if status == 200 else f"GET answers {status}"
    except (OSError, http.client.HTTPException) as failure:
        victim = f"unknown ({type(failure).__name__})"
    notes.put(f"{summary}; task `victim` afterwards: {victim}")


# --- webhooks: hosts that parsers read differently, receivers that never answer ----------

# Spellings of an IPv4 address that libcurl and glibc's inet_aton read as another address
# than a plain decimal reading (leading zeros are octal, 0x is hex, fewer parts fill the
# rest, one number is all 32 bits), and numbers no parser takes as an address.
WEBHOOK_HOSTS = [
    "012.9.9.9", "172.032.0.1", "0127.0.0.1", "127.000.000.001", "127.0.0.01", "01.02.03.04", "0x7f.0.0.1",
    "0X7F.1", "0xa.0.0.1", "10.0.0.0x1", "127.1", "127.0.1", "0177.1", "2130706433", "017700000001",
    "0x7f000001", "0", "00", "127.0.0.1.", "1.2.3.4.5", "256.1.1.1", "4294967296", "08.1.1.1", "0x",
    "1e1.1.1.1", "example.123", "1..2.3", "[::ffff:012.1.1.1]", "[::ffff:127.1]", "[::ffff:1.2.3.04]",
]


def webhook_hosts(port, options, stop, done, notes):
    """POST /v1/webhooks with each spelling in WEBHOOK_HOSTS (the daemon allows private
    targets, so no address check refuses them): how many were made (each deleted at once)."""
    api = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    made, refused, other = [], 0, {}
    for host in WEBHOOK_HOSTS:
        status, reply = post(api, "/v1/webhooks", {"url": f"http://{host}:9/hook", "events": ["task.created"]})
        if status == 201:
            made.append(host)
            api.request("DELETE", f"/v1/webhooks/{reply['id']}")
            api.getresponse().read()
        elif status == 422 and (reply or {}).get("code") == "webhook_url_refused":
            refused += 1
        else:
            other[status] = other.get(status, 0) + 1
    api.close()
    done.set()
    notes.put(f"{len(made)} of {len(WEBHOOK_HOSTS)} spellings made a webhook"
              f"{' (' + ', '.join(made[:6]) + (', …' if len(made) > 6 else '') + ')' if made else ''}, "
              f"{refused} refused (422 webhook_url_refused){f', other {other}' if other else ''}")


def daemon_threads(pid):
    with open(f"/proc/{pid}/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("Threads:")))


def still_open(socks):
    """How many of `socks` the peer has not closed (what they were sent is read and dropped)."""
    count = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            while sock.recv(65536):
                pass
        except BlockingIOError:
            count += 1
        except OSError:
            pass
    return count


def webhook_hang(port, options, stop, done, notes):
    """99 webhooks whose receiver accepts and never answers, then one whose receiver
    answers at once, all on task.created; one task made: how long until the answering
    receiver has its delivery, how many hanging attempts were in flight meanwhile, and
    what they cost the daemon (threads, RSS)."""
    pid = options["daemon_pid"]
    hanging = socket.create_server(("127.0.0.1", 0), backlog=1024)
    fast = socket.create_server(("127.0.0.1", 0), backlog=16)
    held, arrived = [], []

    def hold():
        while True:
            try:
                held.append(hanging.accept()[0])
            except OSError:
                return

    def answer():
        while True:
            try:
                connection, _ = fast.accept()
            except OSError:
                return
            with connection:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                arrived.append(time.monotonic())
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    for target in (hold, answer):
        threading.Thread(target=target, daemon=True).start()
    api = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        idle = (daemon_threads(pid), servers.rss_kib(pid) / 1024)
        for index in range(99):
            status, _ = post(api, "/v1/webhooks", {"url": f"http://127.0.0.1:{hanging.getsockname()[1]}/{index}",
                                                   "events": ["task.created"]})
            assert status == 201, status
        status, _ = post(api, "/v1/webhooks", {"url": f"http://127.0.0.1:{fast.getsockname()[1]}/fast",
                                               "events": ["task.created"]})
        assert status == 201, status
        sent = time.monotonic()
        post(api, "/v1/tasks", {"id": "webhook-trigger", "name": "Trigger"})
        peak_threads, peak_rss, most_held = 0, 0.0, 0  # most_held: hanging connections open at once
        # Until the fast delivery and 2 s more (the hanging attempts have all begun), at most
        # the time box.
        while not stop.is_set() and time.monotonic() - sent < options["timebox"] - 5:
            peak_threads = max(peak_threads, daemon_threads(pid))
            peak_rss = max(peak_rss, servers.rss_kib(pid) / 1024)
            most_held = max(most_held, still_open(list(held)))
            if arrived and time.monotonic() - arrived[0] > 2:
                break
            time.sleep(0.05)
        waited = f"after {arrived[0] - sent:.2f} s" if arrived else f"not within {time.monotonic() - sent:.0f} s"
        done.set()
        notes.put(f"the answering receiver's delivery {waited}; hanging attempts in flight at once: at most {most_held} of 99; "
                  f"daemon threads {idle[0]} → {peak_threads}, RSS {idle[1]:.0f} → {peak_rss:.0f} MiB")
    finally:
        api.close()
        hanging.close()
        fast.close()
        for connection in held:
            connection.close()


# --- phases ---------------------------------------------------------------------------------

def big_tasks(port, options):
    register_tasks(port, [{"id": f"big-{i}", "name": f"Big {i}", "metadata": big_metadata(i)}
                          for i in range(options["big_tasks"])])


def victim_task(port, options):
    register_tasks(port, [{"id": "victim", "name": "Victim"}])


PHASES = {  # name: (attack, setup)
    "quiet": (quiet, None),
    "slow-readers": (slow_readers, big_tasks),
    "half-heads": (half_sent_heads, None),
    "flood": (connection_flood, None),
    "slow-bodies": (slow_bodies, None),
    "deep-tree": (deep_tree, None),
    "catch-up-storm": (catch_up_storm, big_tasks),
    "catch-up-lockout": (catch_up_lockout, big_tasks),
    "huge-heads": (huge_heads, None),
    "hostile-bytes": (hostile_bytes, victim_task),
    "webhook-hosts": (webhook_hosts, None),
    "webhook-hang": (webhook_hang, None),
    "token-storm": (token_storm, admin_and_report_tokens),
}

# Flags of the daemon of some phases: the webhooks' receivers are on loopback.
PHASE_FLAGS = {"webhook-hosts": ("--webhook-allow-private",), "webhook-hang": ("--webhook-allow-private",)}


def attacker_main(attack, port, options, stop, done, notes):
    """The child process: lower priority, then the attack."""
    os.nice(10)
    attack(port, options, stop, done, notes)


def run_phase(name, options, log_folder, log):
    """One phase on its own daemon; returns its figures (always, whatever happens)."""
    attack, setup = PHASES[name]
    options = dict(options)  # a phase's setup may add to them (tokens) for its daemon alone
    result = {"phase": name, "notes": "", "alive": None, "exit": None, "error": None}
    context = multiprocessing.get_context("spawn")
    stop, done, notes = context.Event(), context.Event(), context.Queue()
    daemon_log = open(os.path.join(log_folder, f"{name}.log"), "w")
    server = load = attacker = None
    try:
        server = servers.Headway(options["durability"], extra=PHASE_FLAGS.get(name, ()), stderr=daemon_log,
                                 many_clients_from_one_address=False)
        if setup:
            started = time.monotonic()
            setup(server.port, options)
            log(f"  setup {setup.__name__} in {time.monotonic() - started:.1f} s")
        load = HonestLoad(server, options["runners"], options["rate"], options["subscribers"],
                          token=options.get("token"), heartbeat_token=options.get("heartbeat_token"))
        time.sleep(1.0)
        before = load.mark()
        time.sleep(options["seconds"])
        middle = load.mark()
        attacker = context.Process(target=attacker_main, args=(attack, server.port, dict(options, daemon_pid=server.pid),
                                                               stop, done, notes))
        attacker.start()
        shortest, longest = middle["at"] + options["seconds"], middle["at"] + options["timebox"]
        while time.monotonic() < longest and not (time.monotonic() >= shortest and done.is_set()):
            time.sleep(0.1)
        result["alive"] = server.process.poll() is None
        end = load.mark()
        result["timed_out"] = not done.is_set()
        result["quiet"], result["attack"] = load.window(before, middle), load.window(middle, end, True)
        stop.set()
        attacker.join(timeout=30)
        try:
            result["notes"] = notes.get(timeout=5)
        except Exception:  # queue.Empty: the attack ended without a word
            result["notes"] = "(no notes)"
        if result["timed_out"]:
            result["notes"] += f" [cut off after the {options['timebox']} s time box]"
        if load.heartbeats:
            q, a = result["quiet"], result["attack"]
            result["notes"] += (f"; heartbeat probe (every 50 ms) p99 / max ms quiet → attack: "
                                f"{number(q['heartbeat_p99_ms'])} / {number(q['heartbeat_max_ms'])} → "
                                f"{number(a['heartbeat_p99_ms'])} / {number(a['heartbeat_max_ms'])}")
    except Exception as failure:  # a phase that breaks is reported, the next one still runs
        result["error"] = f"{type(failure).__name__}: {failure}"
    finally:
        stop.set()
        if attacker is not None and attacker.is_alive():
            attacker.kill()
            attacker.join(timeout=10)
        if load is not None:
            load.stop()
        if server is not None:
            server.stop()
            result["exit"] = server.process.returncode
        daemon_log.close()
    with open(daemon_log.name, errors="replace") as written:
        lines = written.read().splitlines()
    result["daemon_log_lines"], result["daemon_log_tail"] = len(lines), lines[-3:]
    # The catch-up budget's use, as its refusal lines give it (the only record a build
    # without the `headway_catch_up_bytes` metric keeps).
    used = [int(m.group(1)) for m in map(re.compile(r"event=events\.catch_ups_refused .*used_bytes=(\d+)").search, lines) if m]
    if used:
        result["notes"] += (f"; {len(used)} lines `events.catch_ups_refused`, used_bytes at most "
                            f"{max(used) / 2**20:.0f} MiB")
    return result


def verdict(result, options):
    """The failed criteria of a phase (none: PASS)."""
    if result["error"]:
        return [result["error"]]
    quiet_, attack = result["quiet"], result["attack"]
    failed = []
    if not result["alive"]:
        failed.append("daemon died")
    if attack["errors"]:
        failed.append("honest errors")
    for key, label in (("p99_ms", "request p99"), ("event_p99_ms", "event p99")):
        if attack[key] is None or quiet_[key] is None:
            failed.append(f"no {label}")
        elif attack[key] > 2 * quiet_[key]:
            failed.append(f"{label} {attack[key] / quiet_[key]:.1f}x")
    if attack["rss_peak_mib"] > rss_bound(result, options):
        failed.append("RSS")
    return failed


def rss_bound(result, options):
    return options["rss_factor"] * result["quiet"]["rss_peak_mib"] + options["rss_slack_mib"]


def number(value, pattern="{:.1f}"):
    return "—" if value is None else pattern.format(value)


def exit_text(code):
    if code is None:
        return "—"
    return {0: "clean", -6: "SIGABRT", -9: "killed"}.get(code, f"exit {code}")


def table(results, options):
    """The Markdown table of every phase, then its notes."""
    rows = ["| phase | req p50 ms | req p99 ms quiet → attack | × | event p99 ms quiet → attack | × "
            "| new subscriber's snapshot, max ms | RSS MiB quiet → peak (bound) | CPU % | honest errors "
            "| alive / stop | verdict |", "|---|" + "---|" * 11]
    for r in results:
        if r["error"]:
            rows.append(f"| {r['phase']} |" + " |" * 9 + f" {exit_text(r['exit'])} | FAIL: {r['error']} |")
            continue
        q, a = r["quiet"], r["attack"]
        ratio = lambda key: number(a[key] / q[key], "{:.2f}") if a[key] is not None and q[key] else "—"
        failed = verdict(r, options)
        rows.append(
            f"| {r['phase']} | {number(a['p50_ms'])} | {number(q['p99_ms'])} → {number(a['p99_ms'])} "
            f"| {ratio('p99_ms')} | {number(q['event_p99_ms'])} → {number(a['event_p99_ms'])} "
            f"| {ratio('event_p99_ms')} | {number(q['snapshot_max_ms'], '{:.0f}')} → "
            f"{number(a['snapshot_max_ms'], '{:.0f}')} | {q['rss_peak_mib']:.0f} → {a['rss_peak_mib']:.0f} "
            f"({rss_bound(r, options):.0f}) | {number(a['cpu_percent'], '{:.0f}')} "
            f"| {sum(a['errors'].values()) and a['errors'] or 0} | {'yes' if r['alive'] else '**no**'} / "
            f"{exit_text(r['exit'])} | {'PASS' if not failed else 'FAIL: ' + ', '.join(failed)} |")
    notes = [f"- **{r['phase']}**: {r['notes']}" + (f" (daemon log: {r['daemon_log_lines']} lines)"
                                                   if r.get("daemon_log_lines") else "") for r in results]
    return "\n".join(rows) + "\n\n" + "\n".join(notes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated, from: " + ", ".join(PHASES))
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the quiet and the attack windows")
    parser.add_argument("--timebox", type=float, default=90.0, help="longest attack window, in seconds")
    parser.add_argument("--runners", type=int, default=8)
    parser.add_argument("--rate", type=float, default=25.0, help="updates per second per runner")
    parser.add_argument("--subscribers", type=int, default=20)
    parser.add_argument("--durability", default="normal", choices=["full", "normal"])
    parser.add_argument("--big-tasks", type=int, default=8000, help="tasks with 4 KB metadata (slow readers, storm)")
    parser.add_argument("--slow-readers", type=int, default=20)
    parser.add_argument("--half-heads", type=int, default=3000)
    parser.add_argument("--flood", type=int, default=11000)
    parser.add_argument("--slow-bodies", type=int, default=500)
    parser.add_argument("--depth-cap", type=int, default=1000)
    parser.add_argument("--leaf-updates", type=int, default=20)
    parser.add_argument("--storm", type=int, default=100, help="subscriptions opened and closed per round")
    parser.add_argument("--token-storm", type=int, default=5000, help="tokens the token storm makes")
    parser.add_argument("--lockout-seconds", type=float, default=45.0,
                        help="how long the catch-up lock-out keeps its 8 unread streams (past the 30 s stall timeout)")
    parser.add_argument("--rss-factor", type=float, default=2.0)
    parser.add_argument("--rss-slack-mib", type=float, default=200.0)
    parser.add_argument("--json", metavar="PATH", help="also write every figure to PATH")
    args = parser.parse_args()
    phases = [name.strip() for name in args.phases.split(",") if name.strip()]
    unknown = [name for name in phases if name not in PHASES]
    if unknown:
        parser.error(f"unknown phases: {', '.join(unknown)}")
    options = vars(args)
    servers.pin_this_process_to_cpu1()  # also raises RLIMIT_NOFILE to its hard limit
    log = lambda text: print(text, file=sys.stderr, flush=True)
    results = []
    with tempfile.TemporaryDirectory() as log_folder:
        for name in phases:
            log(f"phase {name}")
            result = run_phase(name, options, log_folder, log)
            results.append(result)
            log(f"  {'error: ' + result['error'] if result['error'] else 'done'}; notes: {result['notes']}")
            if result.get("daemon_log_tail"):
                log("  daemon log ends: " + " | ".join(line[:200] for line in result["daemon_log_tail"]))
    print(f"Honest load: {args.runners} runners x {args.rate:g} updates/s, {args.subscribers} subscribers, "
          f"a new subscriber each second; windows of {args.seconds:g} s (attack at most {args.timebox:g} s); "
          f"--durability {args.durability}; {servers.HEADWAYD}. Bound: p99 ≤ 2 × quiet, "
          f"RSS ≤ {args.rss_factor:g} × quiet + {args.rss_slack_mib:g} MiB, no honest error, alive.\n")
    print(table(results, options))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"options": options, "phases": [dict(r, failed=verdict(r, options)) for r in results]},
                      out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
