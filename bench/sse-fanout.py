#!/usr/bin/env python3
"""Event-stream fan-out: N subscribers, progress updates at a fixed rate, and what arrives.

Starts the release headwayd (pinned to CPU 0) on a free loopback port with a fresh
database, opens N subscribers from one epoll loop (this process, pinned to CPU 1), then
posts progress updates to one task at RATE per second for SECONDS. Each update's label
carries its send time, so every subscriber measures publish-to-receive latency. Prints:
subscribers connected, events delivered vs expected (every subscriber should receive
every acknowledged update), latency p50/p99, and the daemon's RSS per subscriber.

    bench/sse-fanout.py --subscribers 1000 [--rate 5 --seconds 30 --durability full]
"""
import argparse
import http.client
import os
import re
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("HEADWAYD", os.path.join(ROOT, ".build/release/headwayd"))
STAMP = re.compile(rb'"label":"t=(\d+)"')


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """User + system CPU time of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Subscriber:
    __slots__ = ("sock", "buffer", "snapshot", "events", "latencies")

    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""
        self.snapshot = False
        self.events = 0
        self.latencies = []


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=5.0, help="updates per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--durability", default="full")
    args = parser.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.subscribers + 1024), hard))
    if os.cpu_count() and os.cpu_count() >= 2:
        os.sched_setaffinity(0, {1})

    work = tempfile.mkdtemp()
    port = free_port()
    daemon = subprocess.Popen(
        ["taskset", "-c", "0", BINARY, "--listen", f"127.0.0.1:{port}", "--db", f"{work}/fanout.db",
         "--durability", args.durability, "--log-level", "warn",
         "--max-subscribers", str(max(10_000, args.subscribers))])
    try:
        for _ in range(400):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.025)
        api = http.client.HTTPConnection("127.0.0.1", port)
        api.request("POST", "/v1/tasks", body='{"id":"fanout","name":"Fan-out benchmark"}',
                    headers={"Content-Type": "application/json"})
        assert api.getresponse().read() and True
        time.sleep(0.5)
        rss_before = rss_kib(daemon.pid)

        selector = selectors.EpollSelector()
        subscribers = []
        request = b"GET /v1/events HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"
        started = time.monotonic()

        def pump(timeout):
            for key, _ in selector.select(timeout):
                subscriber = key.data
                try:
                    chunk = subscriber.sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    selector.unregister(subscriber.sock)
                    continue
                now = time.time_ns()
                data = subscriber.buffer + chunk
                end = data.rfind(b"\n\n")
                if end < 0:
                    subscriber.buffer = data
                    continue
                complete, subscriber.buffer = data[:end + 2], data[end + 2:]
                if not subscriber.snapshot and b"event: snapshot" in complete:
                    subscriber.snapshot = True
                for match in STAMP.finditer(complete):
                    subscriber.events += 1
                    subscriber.latencies.append((now - int(match.group(1))) / 1e6)

        # Connect in batches so the listen backlog never overflows.
        for first in range(0, args.subscribers, 500):
            for _ in range(first, min(first + 500, args.subscribers)):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(request)
                sock.setblocking(False)
                subscriber = Subscriber(sock)
                subscribers.append(subscriber)
                selector.register(sock, selectors.EVENT_READ, subscriber)
            deadline = time.monotonic() + 30
            while sum(s.snapshot for s in subscribers) < len(subscribers) and time.monotonic() < deadline:
                pump(0.05)
        connected = sum(s.snapshot for s in subscribers)
        connect_seconds = time.monotonic() - started
        for _ in range(20):
            pump(0.05)
        rss_after = rss_kib(daemon.pid)
        # Idle: subscribers connected, nothing happening (a heartbeat may fall in the window).
        cpu_start, idle_start = cpu_seconds(daemon.pid), time.monotonic()
        while time.monotonic() - idle_start < 5:
            pump(0.1)
        idle_cpu = 100 * (cpu_seconds(daemon.pid) - cpu_start) / (time.monotonic() - idle_start)

        acknowledged = []

        def drive():
            driver = http.client.HTTPConnection("127.0.0.1", port)
            interval = 1.0 / args.rate
            next_time = time.monotonic()
            for index in range(int(args.seconds * args.rate)):
                next_time += interval
                body = f'{{"increment":1,"label":"t={time.time_ns()}"}}'
                driver.request("POST", "/v1/tasks/fanout/progress", body=body,
                               headers={"Content-Type": "application/json"})
                response = driver.getresponse()
                response.read()
                if response.status == 200:
                    acknowledged.append(index)
                time.sleep(max(0.0, next_time - time.monotonic()))

        driver = threading.Thread(target=drive)
        cpu_start, drive_start = cpu_seconds(daemon.pid), time.monotonic()
        driver.start()
        while driver.is_alive():
            pump(0.05)
        drive_cpu = 100 * (cpu_seconds(daemon.pid) - cpu_start) / (time.monotonic() - drive_start)
        drain_until = time.monotonic() + 3
        while time.monotonic() < drain_until:
            pump(0.05)

        expected = len(acknowledged) * connected
        delivered = sum(s.events for s in subscribers if s.snapshot)
        latencies = sorted(l for s in subscribers for l in s.latencies)
        rss_per = (rss_after - rss_before) * 1024 / max(1, connected)
        print(f"subscribers requested     {args.subscribers}")
        print(f"subscribers connected     {connected} (in {connect_seconds:.1f} s)")
        print(f"updates acknowledged      {len(acknowledged)} at {args.rate}/s for {args.seconds:.0f} s")
        print(f"events delivered/expected {delivered}/{expected} ({100.0 * delivered / max(1, expected):.2f}%)")
        if latencies:
            print(f"latency p50 / p99         {statistics.median(latencies):.2f} ms / "
                  f"{latencies[int(len(latencies) * 0.99) - 1]:.2f} ms")
        print(f"daemon CPU while driving  {drive_cpu:.1f}% of a core")
        print(f"daemon CPU while idle     {idle_cpu:.2f}% of a core (5 s, all subscribers connected)")
        print(f"daemon RSS                {rss_before / 1024:.1f} MiB idle -> {rss_after / 1024:.1f} MiB "
              f"with subscribers ({rss_per / 1024:.1f} KiB per subscriber)")
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            code = daemon.wait(timeout=60)
            print(f"daemon stopped            exit {code}")
        except subprocess.TimeoutExpired:
            daemon.kill()
            print("daemon stopped            killed after 60 s")


if __name__ == "__main__":
    main()
