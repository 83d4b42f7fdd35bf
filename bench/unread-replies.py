#!/usr/bin/env python3
"""One client that asks for large pages on many connections and reads none of them.

A release headwayd (HEADWAYD, default .build/release/headwayd) on a fresh database holds
250 tasks with 4 KB metadata, so one `GET /v1/tasks?page_size=500` is a full 1 MiB page.
The hoarder opens CONNECTIONS connections from 127.0.0.1, each with a 4 KiB receive buffer,
sends that request on each and never reads. Then:

  held       the bytes queued in the daemon's sockets for their peers (`ss -tm`: the
             kernel's send queues, where a reply the library has written waits) and the
             daemon's RSS (where a reply the library still holds waits)
  refused    how many of the hoarder's requests were answered 503 (read from the head
             of each reply once the run ends)
  honest     the status and time of one page read from 127.0.0.2 while the hoarder holds on

    bench/unread-replies.py [--connections 300]
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from abuse import big_metadata, register_tasks  # noqa: E402

PAGE = b"GET /v1/tasks?page_size=500 HTTP/1.1\r\nHost: localhost\r\n\r\n"


def queued_bytes(port):
    """The bytes waiting in the send queues of the daemon's sockets on `port` (ss -tm: tb is
    the send buffer, wmem_queued the bytes in it)."""
    out = subprocess.run(["ss", "-tmnH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True).stdout
    return sum(int(m) for m in re.findall(r"w(\d+),", out))


def honest_page(port):
    """Status and seconds of one page read from another address."""
    started = time.perf_counter()
    sock = socket.socket()
    sock.bind(("127.0.0.2", 0))
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    sock.sendall(PAGE)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    while len(rest) < length:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        rest += chunk
    sock.close()
    return status, time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=300)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        port = servers.free_port()
        daemon = subprocess.Popen([servers.HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", f"{folder}/h.db",
                                   "--durability", "normal", "--log-level", "error"])
        try:
            servers.wait_for_port(port, daemon)
            register_tasks(port, [{"id": f"t{i}", "name": f"Task {i}", "metadata": big_metadata(i)}
                                  for i in range(250)])
            rss_before = servers.rss_kib(daemon.pid)
            hoard = []
            for _ in range(options.connections):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(("127.0.0.1", port))
                sock.sendall(PAGE)
                hoard.append(sock)
            time.sleep(2)  # the reads run and their replies are written as far as they go
            held = queued_bytes(port)
            rss = servers.rss_kib(daemon.pid)
            status, seconds = honest_page(port)
            statuses = {}
            for sock in hoard:
                sock.settimeout(5)
                head = b""
                while b"\r\n" not in head:
                    chunk = sock.recv(256)
                    if not chunk:
                        break
                    head += chunk
                code = head.split(b" ")[1].decode() if head.count(b" ") else "none"
                statuses[code] = statuses.get(code, 0) + 1
                sock.close()
            figures = {"connections": options.connections, "kernel_send_queues_mb": round(held / 1e6, 1),
                       "rss_mb_before": round(rss_before / 1024, 1), "rss_mb_held": round(rss / 1024, 1),
                       "hoarder_statuses": statuses, "honest_status": status,
                       "honest_seconds": round(seconds, 3)}
            print(json.dumps(figures))
        finally:
            daemon.terminate()
            daemon.wait(30)


if __name__ == "__main__":
    main()
