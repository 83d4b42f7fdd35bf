#!/usr/bin/env python3
"""Event-stream readers that never read: what they cost the daemon, and whether it lets go.

Starts headwayd on a fresh database, registers TASKS tasks with METADATA bytes of metadata
each, then opens READERS sockets with a 4 KiB receive buffer that send `GET /v1/events`
and never read. Prints the daemon's RSS before the readers and every few seconds after,
how many of their connections the daemon still holds open (ESTABLISHED server-side, from
/proc/net/tcp), and how many cut-offs it logged.

    bench/slow-readers.py [--binary .build/release/headwayd] [--tasks 8000] [--metadata 4000]
                          [--readers 20] [--seconds 80] [-- extra headwayd flags]
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def established_server_side(port):
    """Connections whose local port is `port` and whose state is ESTABLISHED."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)
                for line in lines:
                    fields = line.split()
                    if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":
                        count += 1
        except FileNotFoundError:
            pass
    return count


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/release/headwayd")
    parser.add_argument("--tasks", type=int, default=8000)
    parser.add_argument("--metadata", type=int, default=4000, help="bytes of metadata per task")
    parser.add_argument("--readers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=80)
    parser.add_argument("extra", nargs="*", help="more headwayd flags (after --)")
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="slow-readers-")
    port = free_port()
    log_path = os.path.join(folder, "headwayd.log")
    log = open(log_path, "w")
    daemon = subprocess.Popen([args.binary, "--listen", f"127.0.0.1:{port}", "--db", os.path.join(folder, "h.db"),
                               "--durability", "normal", *args.extra], stderr=log)
    readers = []
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        client = http.client.HTTPConnection("127.0.0.1", port)
        metadata = {"pad": "m" * args.metadata}
        for index in range(args.tasks):
            # A long stall timeout: no stall events during the run (they would flood the streams).
            body = json.dumps({"id": f"t{index}", "name": f"Task {index}", "metadata": metadata,
                               "stall_timeout_seconds": 86400})
            client.request("POST", "/v1/tasks", body, {"Content-Type": "application/json"})
            response = client.getresponse()
            response.read()
            if response.status != 201:
                sys.exit(f"register failed: {response.status}")
        client.close()
        time.sleep(1)
        print(f"binary            {args.binary} {' '.join(args.extra)}")
        print(f"tasks             {args.tasks} x {args.metadata} B metadata")
        print(f"RSS before        {rss_mib(daemon.pid):.0f} MiB")

        for _ in range(args.readers):
            reader = socket.socket()
            reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            reader.connect(("127.0.0.1", port))
            reader.sendall(b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
            readers.append(reader)
        start = time.monotonic()
        peak = 0.0
        next_report = 0.0
        while (elapsed := time.monotonic() - start) < args.seconds:
            rss = rss_mib(daemon.pid)
            peak = max(peak, rss)
            if elapsed >= next_report:
                print(f"t={elapsed:5.1f} s      RSS {rss:6.0f} MiB   readers' connections open "
                      f"{established_server_side(port)}/{args.readers}")
                next_report += 5
            time.sleep(0.25)
        log.flush()
        with open(log_path) as lines:
            cut_offs = [line for line in lines if "events.subscriber_too_slow" in line]
        print(f"RSS peak          {peak:.0f} MiB")
        print(f"cut-offs logged   {len(cut_offs)}" + (f" (e.g. {cut_offs[0].split('event=')[1].strip()})" if cut_offs else ""))
    finally:
        for reader in readers:
            reader.close()
        daemon.terminate()
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()


if __name__ == "__main__":
    main()
