#!/usr/bin/env python3
"""Catch-up storm: clients that subscribe with a filter and leave at once, then an honest one.

Registers N unfinished tasks with about 4 KB of metadata each, opens C connections that send
`GET /v1/events?task=…` and close without reading, then times (on fresh connections) an
honest filtered subscriber's snapshot, an unfiltered subscriber's snapshot, a `GET
/v1/tasks/{id}` and a progress update, and the daemon's CPU time over the storm.

    HEADWAYD=path/to/headwayd bench/catchup-storm.py [--tasks 8000] [--clients 100] [--rounds 3]
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("HEADWAYD", os.path.join(ROOT, ".build/release/headwayd"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port):
    for _ in range(500):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.02)
    raise SystemExit("daemon not ready")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def snapshot_seconds(port, path):
    """Seconds from connecting to having the whole snapshot event."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode())
        received = b""
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise SystemExit("stream ended before its snapshot")
            received += chunk
            at = received.find(b"event: snapshot")
            if at >= 0 and received.find(b"\n\n", at) >= 0:
                return time.monotonic() - start


def timed_request(port, method, path, body=None):
    start = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    return time.monotonic() - start, response.status


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=8000)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="catchup-storm-")
    port = free_port()
    daemon = subprocess.Popen([BINARY, "--listen", f"127.0.0.1:{port}", "--db", os.path.join(directory, "h.db"),
                               "--durability", "normal", "--log-level", "warn", "--max-subscribers", "20000"])
    try:
        wait_ready(port)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        metadata = {"blob": "x" * 3900}
        for index in range(arguments.tasks):
            body = json.dumps({"id": f"t{index}", "name": f"Task {index}", "total": 100, "metadata": metadata})
            connection.request("POST", "/v1/tasks", body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            if response.status != 201:
                raise SystemExit(f"register failed: {response.status}")
        connection.close()
        print(f"{BINARY}: {arguments.tasks} unfinished tasks, {arguments.clients} clients leaving at once")
        for round_number in range(arguments.rounds):
            cpu_before = cpu_seconds(daemon.pid)
            leaving = []
            for index in range(arguments.clients):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(f"GET /v1/events?task=t{index} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
                leaving.append(sock)
            for sock in leaving:
                sock.close()
            honest = snapshot_seconds(port, "/v1/events?task=t4242")
            read, read_status = timed_request(port, "GET", "/v1/tasks/t17")
            update, update_status = timed_request(port, "POST", f"/v1/tasks/t{round_number}/progress",
                                                  json.dumps({"completed": 1}))
            full = snapshot_seconds(port, "/v1/events")
            # Let the storm's work finish before reading the CPU it cost.
            for _ in range(600):
                a = cpu_seconds(daemon.pid)
                time.sleep(0.5)
                if cpu_seconds(daemon.pid) - a < 0.02:
                    break
            cpu = cpu_seconds(daemon.pid) - cpu_before
            print(f"round {round_number + 1}: honest ?task= snapshot {honest * 1000:.0f} ms, "
                  f"GET /v1/tasks/t17 {read * 1000:.0f} ms ({read_status}), "
                  f"POST progress {update * 1000:.0f} ms ({update_status}), "
                  f"unfiltered snapshot {full * 1000:.0f} ms, daemon CPU {cpu:.2f} s")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)


if __name__ == "__main__":
    main()
