#!/usr/bin/env python3
"""Many clients sending 1,000-item batches at once, and how long a `/healthz` takes meanwhile.

A release headwayd (HEADWAYD, default .build/release/headwayd; `--durability normal`) on a
fresh database holds 1,000 tasks. CONNECTIONS keep-alive connections each send
`POST /v1/progress` with 1,000 items (an increment of each task), read the reply and send
the next, for SECONDS; one more connection asks `GET /healthz` every 20 ms and times each
answer (the daemon pinned to CPU 0 unless --both-cores). Prints the probe's percentiles, the batches applied
and refused a second, and the daemon's
threads' CPU (from /proc: which thread the load lands on).

    bench/batch-flood.py [--connections 512] [--seconds 10]
"""
import argparse
import json
import multiprocessing
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from abuse import percentile, register_tasks  # noqa: E402


def batch_request(tasks):
    body = json.dumps({"updates": [{"task_id": f"t{i}", "increment": 1} for i in range(tasks)]}).encode()
    return (b"POST /v1/progress HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def reply_length(buffer):
    """The length of the first whole reply in `buffer`, or None."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end].lower()
    start = head.find(b"content-length:")
    length = int(head[start + 15:head.find(b"\r\n", start) if head.find(b"\r\n", start) > 0 else None])
    return end + 4 + length if len(buffer) >= end + 4 + length else None


def flood(port, connections, request, stop, answered, refused, reopened):
    """Runs in a process of its own, so that the probe's timings never include waiting for
    this loop's turn at the interpreter lock; `answered` and `refused` are shared counters
    of the batches applied (200) and of the others (503 `server_busy`: a client's share of
    unread replies taken by its batches under way). A connection the daemon closes (it
    refuses such a batch from its head, before reading the body, and closes) is opened
    again at once and sends the next batch, as an attacker's would: `reopened` counts them."""
    selector = selectors.DefaultSelector()

    def connect():
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_WRITE, {"out": request, "in": b""})

    def reopen(sock):
        selector.unregister(sock)
        sock.close()
        with reopened.get_lock():
            reopened.value += 1
        connect()

    for _ in range(connections):
        connect()
    while not stop.is_set():
        for key, events in selector.select(0.2):
            sock, state = key.fileobj, key.data
            try:
                if events & selectors.EVENT_WRITE and state["out"]:
                    sent = sock.send(state["out"])
                    state["out"] = state["out"][sent:]
                    if not state["out"]:
                        selector.modify(sock, selectors.EVENT_READ, state)
                elif events & selectors.EVENT_READ:
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        reopen(sock)
                        continue
                    state["in"] += chunk
                    whole = reply_length(state["in"])
                    if whole is not None:
                        counter = answered if state["in"].startswith(b"HTTP/1.1 200") else refused
                        with counter.get_lock():
                            counter.value += 1
                        state["in"] = state["in"][whole:]
                        state["out"] = request
                        selector.modify(sock, selectors.EVENT_WRITE, state)
            except BlockingIOError:
                pass
            except ConnectionError:
                # Reset while sending the rest of a batch refused from its head: its reply,
                # if it came, is counted, and the connection opened again.
                try:
                    if reply_length(state["in"] + sock.recv(1 << 16)) is not None:
                        with refused.get_lock():
                            refused.value += 1
                except OSError:
                    pass
                reopen(sock)


def probe(port, stop, delays):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(30)
    while not stop.is_set():
        started = time.perf_counter()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        data = b""
        while reply_length(data) is None:
            chunk = sock.recv(4096)
            if not chunk:
                return
            data += chunk
        delays.append(time.perf_counter() - started)
        time.sleep(0.02)


def thread_cpu(pid):
    """CPU seconds of each of the daemon's threads, by name."""
    seconds = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm, open(f"/proc/{pid}/task/{tid}/stat") as stat:
                name = comm.read().strip()
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds[name] = seconds.get(name, 0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return seconds


def main():  # noqa: C901
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--both-cores", action="store_true", help="do not pin the daemon to CPU 0")
    options = parser.parse_args()
    PIN = [] if options.both_cores else ["taskset", "-c", "0"]
    with tempfile.TemporaryDirectory() as folder:
        port = servers.free_port()
        daemon = subprocess.Popen(PIN + [servers.HEADWAYD, "--listen", f"127.0.0.1:{port}",
                                   "--db", f"{folder}/h.db", "--durability", "normal", "--log-level", "error"])
        try:
            servers.wait_for_port(port, daemon)
            register_tasks(port, [{"id": f"t{i}", "name": f"Task {i}"} for i in range(1000)])
            stop, delays = threading.Event(), []
            quiet = threading.Thread(target=probe, args=(port, stop, delays))
            quiet.start()
            time.sleep(2)
            stop.set()
            quiet.join()
            quiet_delays, delays, stop = delays, [], threading.Event()
            flood_stop, answered = multiprocessing.Event(), multiprocessing.Value("l", 0)
            refused, reopened = multiprocessing.Value("l", 0), multiprocessing.Value("l", 0)
            before = thread_cpu(daemon.pid)
            flooder = multiprocessing.Process(target=flood, args=(port, options.connections, batch_request(1000),
                                                                  flood_stop, answered, refused, reopened))
            prober = threading.Thread(target=probe, args=(port, stop, delays))
            started = time.monotonic()
            flooder.start()
            prober.start()
            time.sleep(options.seconds)
            stop.set()
            flood_stop.set()
            prober.join()
            flooder.join()
            elapsed = time.monotonic() - started
            after = thread_cpu(daemon.pid)
            busiest = sorted(((after[name] - before.get(name, 0), name) for name in after), reverse=True)[:4]

            def ms(values, fraction):
                value = percentile(values, fraction)
                return None if value is None else round(value * 1000, 1)

            print(json.dumps({
                "quiet_healthz_ms": {"p50": ms(quiet_delays, 0.5), "p99": ms(quiet_delays, 0.99)},
                "flood_healthz_ms": {"p50": ms(delays, 0.5), "p99": ms(delays, 0.99),
                                     "max": ms(delays, 1.0), "probes": len(delays)},
                "batches_applied_per_second": round(answered.value / elapsed, 1),
                "batches_refused_per_second": round(refused.value / elapsed, 1),
                "connections_reopened_per_second": round(reopened.value / elapsed, 1),
                "thread_cpu_seconds": {name: round(seconds, 2) for seconds, name in busiest},
            }))
        finally:
            daemon.terminate()
            daemon.wait(30)


if __name__ == "__main__":
    main()
