"""systemd's socket activation: headwayd serves the listening socket it is handed as
file descriptor 3 (LISTEN_PID, LISTEN_FDS), and a restart under a holder of that socket
refuses no connection — connections made while no daemon runs wait in the backlog for
the next one. Started here by systemd-socket-activate, and by a holder written in Python
that restarts the daemon as systemd would (systemd is not PID 1 on this machine)."""
import os
import signal
import socket
import subprocess
import threading
import time

import httpx

from conftest import HEADWAYD, free_port


def wait_for_log(path, text, process, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        assert process.poll() is None, path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"no {text!r} in {path.read_text()}")


def test_systemd_socket_activate_hands_over_the_socket(tmp_path):
    port = free_port()
    log = tmp_path / "d.log"
    with open(log, "w") as errors:
        daemon = subprocess.Popen(["systemd-socket-activate", "-l", f"127.0.0.1:{port}", HEADWAYD,
                                   "--db", str(tmp_path / "h.db"), "--listen", "127.0.0.1:1"], stderr=errors)
    try:
        # systemd-socket-activate binds the socket, says so, and waits for a connection: the
        # first one starts the daemon, and waits in the backlog meanwhile.
        wait_for_log(log, f"Listening on 127.0.0.1:{port}", daemon)
        reply = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=20)
        assert reply.status_code == 200
        wait_for_log(log, "event=server.listening", daemon)
        assert f"address=127.0.0.1:{port} socket=inherited" in log.read_text(), log.read_text()
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0


def start_on(listener, database, log):
    """Starts headwayd with `listener` as its fd 3, as systemd does (LISTEN_PID is the
    shell that execs the daemon, so the daemon's own)."""
    def hand_over():
        os.dup2(listener.fileno(), 3)
    with open(log, "a") as errors:
        return subprocess.Popen(
            ["sh", "-c", 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"', HEADWAYD, "--db", str(database)],
            preexec_fn=hand_over, close_fds=False, stderr=errors)


def test_a_restart_refuses_no_connection(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    port = listener.getsockname()[1]
    log = tmp_path / "d.log"
    log.write_text("")
    database = tmp_path / "h.db"
    first = start_on(listener, database, log)
    wait_for_log(log, "event=server.listening", first)

    outcomes = {"ok": 0, "shutting_down": 0, "errors": []}
    stop = threading.Event()

    def client():
        # A fresh connection for each request, as fast as they are answered.
        while not stop.is_set():
            try:
                reply = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=20,
                                  headers={"Connection": "close"})
                if reply.status_code == 200:
                    outcomes["ok"] += 1
                elif reply.status_code == 503:
                    outcomes["shutting_down"] += 1
                else:
                    outcomes["errors"].append(reply.status_code)
            except httpx.HTTPError as error:
                outcomes["errors"].append(repr(error))

    thread = threading.Thread(target=client)
    thread.start()
    second = None
    try:
        deadline = time.monotonic() + 20
        while outcomes["ok"] < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=20) == 0
        before = outcomes["ok"]
        # The socket is held here meanwhile: connections queue in its backlog.
        time.sleep(0.3)
        second = start_on(listener, database, log)
        deadline = time.monotonic() + 20
        while outcomes["ok"] < before + 50 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(timeout=30)
        for daemon in (first, second):
            if daemon and daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(timeout=20)
        listener.close()
    assert outcomes["errors"] == [], outcomes
    assert outcomes["ok"] >= before + 50, outcomes
    assert log.read_text().count("socket=inherited") == 2
