"""The daemon's open-file limit, with the real daemon on loopback: started with a low soft
limit it raises it for its `--max-subscribers`; started with a hard limit too low for them
it serves only the streams its files can hold, the next getting 503
`too_many_subscribers` while the API keeps answering, and says so at start: a warning when
`--max-subscribers` was given (a flag, its variable, a configuration-file line), an info
line when it is the default (a newcomer's `make run`). (50,000 streams are `make bench`'s:
bench/sse-fanout.py --subscribers 50000.)"""
import contextlib
import os
import resource
import signal
import socket
import subprocess
import time

import httpx

from conftest import HEADWAYD, free_port, wait_for_port

# Files the daemon keeps for all but event streams where its limit allows: 1,024 API
# connections and 64 others (database, log, epoll sets…): OpenFileBudget in
# Sources/Daemon/OpenFileLimit.swift.
API_CONNECTIONS, OTHER_FILES = 1024, 64
RESERVE = API_CONNECTIONS + OTHER_FILES


def streams_held(open_files):
    """The streams a limit of `open_files` holds: beside 64 other files, and API
    connections up to 1,024 and a quarter of what the other files leave."""
    api_connections = min(API_CONNECTIONS, (open_files - OTHER_FILES) // 4)
    return open_files - OTHER_FILES - api_connections


@contextlib.contextmanager
def daemon_with_open_files(directory, soft, hard, *arguments, environment=None):
    """headwayd started with the open-file limit (`soft`, `hard`) and `environment` added to
    the test's own; yields (base URL, pid, log path)."""
    port = free_port()
    log_path = directory / "headwayd.log"

    def limit_open_files():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    with open(log_path, "w") as log:
        process = subprocess.Popen([HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", str(directory / "h.db"),
                                    "--durability", "normal", *arguments],
                                   stderr=log, preexec_fn=limit_open_files, env={**os.environ, **(environment or {})})
        try:
            wait_for_port(port, process, "headwayd")
            yield f"http://127.0.0.1:{port}", process.pid, log_path
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0, "headwayd did not stop cleanly"


def open_file_limits(pid):
    """The (soft, hard) limit of open files of process `pid`."""
    with open(f"/proc/{pid}/limits") as limits:
        line = next(line for line in limits if line.startswith("Max open files"))
    return tuple(int(word) for word in line.split()[3:5])


def subscribe(port):
    """Opens an event stream; returns its socket and the status of its response."""
    stream = socket.create_connection(("127.0.0.1", port), timeout=10)
    stream.sendall(b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = stream.recv(4096)
        assert chunk, f"closed after {head!r}"
        head += chunk
    return stream, int(head.split(b" ", 2)[1])


def test_a_low_soft_limit_is_raised_for_the_subscribers(tmp_path):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    wanted = 2000 + RESERVE
    assert hard >= wanted, f"this test needs a hard limit of {wanted} open files, not {hard}"
    with daemon_with_open_files(tmp_path, 256, hard, "--max-subscribers", "2000") as (_, pid, log_path):
        assert open_file_limits(pid) == (wanted, hard)
    assert "limits.open_files" not in log_path.read_text()


def log_line(log_path, event, seconds=10):
    """The first line of `event` in the log, without its time, once written (the daemon's
    log thread writes it soon after the port opens)."""
    deadline = time.monotonic() + seconds
    while True:
        lines = [line for line in log_path.read_text().splitlines() if f"event={event} " in line]
        if lines:
            return lines[0].split(" ", 1)[1]
        assert time.monotonic() < deadline, f"no {event} in {log_path.read_text()}"
        time.sleep(0.02)


def serves_only(base, served):
    """Checks that the daemon at `base` serves `served` event streams, the next getting 503
    too_many_subscribers while the API keeps answering."""
    port = int(base.rsplit(":", 1)[1])
    streams = []
    try:
        for _ in range(served):
            stream, status = subscribe(port)
            streams.append(stream)
            assert status == 200
        refused = httpx.get(f"{base}/v1/events", headers={"Accept": "text/event-stream"})
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "too_many_subscribers"
        # The API keeps the room the streams were not given.
        for _ in range(20):
            assert httpx.get(f"{base}/v1/tasks").status_code == 200
    finally:
        for stream in streams:
            stream.close()


def test_a_hard_limit_too_low_is_said_at_start_and_caps_the_subscribers(tmp_path):
    hard = 200
    served = streams_held(hard)
    assert served == 102
    with daemon_with_open_files(tmp_path, hard, hard, "--max-subscribers", "1000") as (base, pid, log_path):
        assert open_file_limits(pid) == (hard, hard)
        warning = log_line(log_path, "limits.open_files")
        assert warning.startswith(
            f"level=warn event=limits.open_files open_files={hard} max_subscribers=1000 subscribers_served={served} "
            f"wanted={1000 + RESERVE} detail=\"the open-file limit holds {served} event streams beside 34 API connections "
            "and 64 other files;"), warning
        assert "503 too_many_subscribers" in warning and "LimitNOFILE=" in warning, warning
        assert f" max_subscribers={served} " in log_line(log_path, "server.listening")
        serves_only(base, served)


def test_a_default_start_under_a_low_hard_limit_serves_what_it_holds_and_warns_of_nothing(tmp_path):
    """A newcomer's start: no --max-subscribers anywhere, a hard limit far below the
    default's 51,088. Nothing to act on, so no warning: an info line says what is served."""
    hard = 200
    served = streams_held(hard)
    with daemon_with_open_files(tmp_path, hard, hard) as (base, pid, log_path):
        assert open_file_limits(pid) == (hard, hard)
        said = log_line(log_path, "limits.open_files")
        assert said.startswith(
            f"level=info event=limits.open_files open_files={hard} max_subscribers=50000 subscribers_served={served} "
            f"wanted={50000 + RESERVE} detail=\"--max-subscribers is not set, so its default is lowered: the open-file "
            f"limit holds {served} event streams beside 34 API connections and 64 other files;"), said
        assert f" max_subscribers={served} " in log_line(log_path, "server.listening")
        serves_only(base, served)
    warnings = [line for line in log_path.read_text().splitlines() if " level=warn " in line]
    assert warnings == [], warnings


def test_max_subscribers_given_by_its_variable_or_the_configuration_file_is_warned_about(tmp_path):
    hard = 200
    configuration = tmp_path / "headwayd.conf"
    configuration.write_text("max-subscribers = 50000\n")
    for name, arguments, environment in [("variable", [], {"HEADWAY_MAX_SUBSCRIBERS": "50000"}),
                                         ("file", ["--config", str(configuration)], {})]:
        folder = tmp_path / name
        folder.mkdir()
        with daemon_with_open_files(folder, hard, hard, *arguments, environment=environment) as (_, _, log_path):
            warning = log_line(log_path, "limits.open_files")
            assert warning.startswith("level=warn event=limits.open_files open_files=200 max_subscribers=50000 "), \
                f"{name}: {warning}"
            assert "or lower --max-subscribers" in warning, warning
