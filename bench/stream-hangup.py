#!/usr/bin/env python3
"""How long the daemon keeps an event stream whose client hung up.

Opens a stream, reads its snapshot, waits 0, 4 or 8 s (the close falls at another point
of the heartbeat cycle each time), closes the socket, and times how long until
`headway_event_subscribers` reads 0 (polled every 5 ms). Each close on a fresh daemon with
`--sse-heartbeat 15` (the default).

    HEADWAYD=path/to/headwayd bench/stream-hangup.py
"""
import os
import pathlib
import re
import socket
import sys
import tempfile
import time

import httpx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "Tests/integration"))
from conftest import run_headwayd  # noqa: E402


def subscribers(base):
    text = httpx.get(base + "/metrics", timeout=10).text
    return float(re.search(r"^headway_event_subscribers (\S+)$", text, re.M).group(1))


def main():
    seconds = []
    for wait in (0.0, 4.0, 8.0):
        with tempfile.TemporaryDirectory() as folder, run_headwayd(pathlib.Path(folder), "--sse-heartbeat", "15") as base:
            sock = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=10)
            sock.sendall(b"GET /v1/events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n")
            data = b""
            while b"event: snapshot" not in data:
                data += sock.recv(65536)
            time.sleep(wait)
            sock.close()
            closed = time.monotonic()
            while subscribers(base) != 0 and time.monotonic() - closed < 40:
                time.sleep(0.005)
            seconds.append(time.monotonic() - closed)
    print(f"{os.environ.get('HEADWAYD', 'the debug build')}: let go after " + ", ".join(f"{s:.2f}" for s in seconds) + " s")


if __name__ == "__main__":
    main()
