"""Hostile event-stream clients against the real daemon (issue 45): streams that never
read hold at most their client's share of the catch-up budget, so another client still
gets its snapshot; and a client that hangs up is let go at once, not at a heartbeat."""
import concurrent.futures
import re
import socket
import time

import httpx

from conftest import run_headwayd

# About 4.4 KB of JSON per task (metadata takes at most 4 KiB).
METADATA = {"blob": "m" * 4000}


def register(base, documents, connections=8):
    def part(index):
        with httpx.Client(base_url=base, timeout=30) as client:
            return [client.post("/v1/tasks", json=d).status_code for d in documents[index::connections]]

    with concurrent.futures.ThreadPoolExecutor(connections) as pool:
        statuses = [status for statuses in pool.map(part, range(connections)) for status in statuses]
    assert statuses == [201] * len(documents)


def big_tasks(count, parent=None):
    """`count` tasks with 4 KB metadata (under `parent`, if given)."""
    prefix = f"{parent}-" if parent else "big-"
    return [dict({"id": f"{prefix}{i}", "name": "Big", "metadata": METADATA}, **({"parent_id": parent} if parent else {}))
            for i in range(count)]


def port_of(base):
    return int(base.rsplit(":", 1)[1])


def open_stream(port, path, source):
    """A stream from `source` over a tiny receive buffer, whose client never reads."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n".encode())
    return sock


def answered(sock):
    """Whether the daemon has dealt with the stream's catch-up: its bytes fill the tiny
    buffer, or the stream ended (`retry:` alone)."""
    waiting = sock.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT) if readable(sock) else b""
    return len(waiting) > 2048 or (waiting.endswith(b"0\r\n\r\n") and b"retry:" in waiting)


def readable(sock):
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return True
    except BlockingIOError:
        return False


def wait_answered(socks):
    for _ in range(500):
        if all(answered(sock) for sock in socks):
            return
        time.sleep(0.02)
    raise AssertionError("the daemon did not answer the hostile streams within 10 s")


def snapshot(port, path, source):
    """The first event of a new stream from `source`: its name (`snapshot`), or None when
    the stream ended without one (the catch-up was refused: `retry:` alone)."""
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n".encode())
        data = b""
        while b"event: snapshot" not in data:
            chunk = sock.recv(1 << 20)
            data += chunk
            if not chunk or data.endswith(b"\r\n0\r\n\r\n"):  # closed, or the last chunk
                return None
        return "snapshot"


def metric(base, name):
    text = httpx.get(base + "/metrics", timeout=10).text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


# A socket whose client reads nothing takes about 4 MB before the daemon must hold the rest
# (the kernel grows a loopback socket's send buffer up to `tcp_wmem`'s 4 MiB): a catch-up
# held must be well over that, here 11 MB (2,500 tasks).
TASKS = 2500


def test_streams_that_never_read_with_distinct_min_durations_share_one_catch_up(tmp_path):
    """The attack of issue 45 scaled down: 2,500 tasks with 4 KB metadata (11 MB a
    snapshot), then 8 streams that never read, each with its own `min_duration` so that
    none shared another's catch-up: they filled a 16 MiB budget and every other client got
    `retry:` alone, until the stall timeout. A `min_duration` is applied per stream to one
    shared catch-up now."""
    limit = 16 << 20
    with run_headwayd(tmp_path, "--max-catch-up-bytes", str(limit)) as base:
        register(base, big_tasks(TASKS))
        port = port_of(base)
        hostile = [open_stream(port, f"/v1/events?min_duration=0.00{n}", "127.0.0.1") for n in range(1, 9)]
        try:
            wait_answered(hostile)
            assert snapshot(port, "/v1/events", "127.0.0.2") == "snapshot"
            assert snapshot(port, "/v1/events?min_duration=2", "127.0.0.3") == "snapshot"
            used = metric(base, "headway_catch_up_bytes")
            assert used is not None and used < 2 * 11_000_000, f"{used} bytes held: one catch-up, shared"
        finally:
            for sock in hostile:
                sock.close()


def test_streams_that_never_read_hold_no_more_than_their_clients_share(tmp_path):
    """Streams that never read, each of another parent's 2,500 tasks (11 MB each), from
    one address: they took a 24 MiB budget whole. Now they hold their client's floor (one
    catch-up) and no more, and a client from another address gets its snapshot."""
    limit = 24 << 20
    with run_headwayd(tmp_path, "--max-catch-up-bytes", str(limit)) as base:
        documents = [{"id": f"p{p}", "name": f"Parent {p}"} for p in range(4)]
        register(base, documents)
        register(base, [task for p in range(3) for task in big_tasks(TASKS, parent=f"p{p}")] + big_tasks(40, parent="p3"))
        port = port_of(base)
        hostile = [open_stream(port, f"/v1/events?parent_id=p{p}", "127.0.0.1") for p in range(3) for _ in range(2)]
        try:
            wait_answered(hostile)
            assert snapshot(port, "/v1/events?parent_id=p3", "127.0.0.2") == "snapshot"
            used = metric(base, "headway_catch_up_bytes")
            assert used is not None and used <= limit, f"{used} bytes held"
        finally:
            for sock in hostile:
                sock.close()


def test_a_client_that_holds_nothing_gets_its_snapshot_though_others_fill_the_budget(tmp_path):
    """Streams that never read from three addresses, each at its floor (one 11 MB catch-up
    each), fill a 30 MiB budget: a client that holds nothing is refused, and then closes
    the streams whose peers have taken nothing for a while, so that it gets its snapshot
    when it comes back (here within 15 s; the stall timeout, 30 s, would free them later)."""
    limit = 30 << 20
    with run_headwayd(tmp_path, "--max-catch-up-bytes", str(limit)) as base:
        register(base, [{"id": f"p{p}", "name": f"Parent {p}"} for p in range(3)])
        register(base, [task for p in range(3) for task in big_tasks(TASKS, parent=f"p{p}")])
        port = port_of(base)
        hostile = [open_stream(port, f"/v1/events?parent_id=p{p}", f"127.0.0.{p + 1}") for p in range(3)]
        try:
            wait_answered(hostile)
            started, got = time.monotonic(), None
            while got is None and time.monotonic() - started < 15:
                got = snapshot(port, "/v1/events?parent_id=p2", "127.0.0.9")
                if got is None:
                    time.sleep(0.5)  # a refused client comes back (EventSource: after `retry:`)
            assert got == "snapshot", "refused for 15 s"
            used = metric(base, "headway_catch_up_bytes")
            assert used is not None and used <= limit, f"{used} bytes held"
        finally:
            for sock in hostile:
                sock.close()


def test_a_stream_whose_client_hangs_up_is_let_go_at_once(tmp_path):
    """The daemon notices a stream's client hanging up at once, not at the next heartbeat
    (30 s here): the subscriber count drops within a second."""
    with run_headwayd(tmp_path, "--sse-heartbeat", "30") as base:
        port = port_of(base)
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"GET /v1/events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n")
        data = b""
        while b"event: snapshot" not in data:
            data += sock.recv(65536)
        assert metric(base, "headway_event_subscribers") == 1
        sock.close()
        closed = time.monotonic()
        while metric(base, "headway_event_subscribers") != 0 and time.monotonic() - closed < 5:
            time.sleep(0.01)
        seconds = time.monotonic() - closed
        assert metric(base, "headway_event_subscribers") == 0, f"still counted {seconds:.1f} s after the hang-up"
        assert seconds < 1, f"let go after {seconds:.2f} s"
