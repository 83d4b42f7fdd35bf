"""SIGHUP against the real daemon: the configuration file is reread (the log level changes
at once, other settings wait for a restart, a file that no longer parses changes nothing),
the log file is reopened after log rotation (`mv` then SIGHUP, as logrotate does), and a
second SIGTERM/SIGINT during a slow stop ends the daemon at once."""
import contextlib
import os
import signal
import socket
import stat
import subprocess
import time

import httpx

from conftest import HEADWAYD, free_port, wait_for_port


@contextlib.contextmanager
def daemon(tmp_path, *arguments):
    """headwayd on a free port with a fresh database in `tmp_path`, its stderr in
    `tmp_path`/stderr.log, with extra `arguments`; yields (process, base URL)."""
    port = free_port()
    with open(tmp_path / "stderr.log", "a") as errors:
        process = subprocess.Popen(
            [HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", str(tmp_path / "headway.db"),
             "--durability", "normal", *arguments], stderr=errors)
    try:
        wait_for_port(port, process, "headwayd")
        yield process, f"http://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=20)


def wait_for_count(path, text, count, process):
    """Waits (up to 20 s) until `text` occurs `count` times in the file at `path`."""
    for _ in range(1000):
        if path.exists() and path.read_text().count(text) >= count:
            return
        assert process.poll() is None, f"headwayd exited with {process.returncode}"
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} {text!r} in {path.read_text() if path.exists() else 'no file'}")


def stop(process):
    """SIGTERM; the daemon stops cleanly (its last lines written)."""
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0


def request_lines(text, path):
    """The `http.request` lines logged for `path`."""
    return [line for line in text.splitlines() if "event=http.request" in line and f" path={path} " in line]


def test_sighup_rereads_the_log_level_and_leaves_other_settings_for_a_restart(tmp_path):
    config = tmp_path / "headwayd.conf"
    config.write_text("# requests log at info\nlog-level = info\n")
    log = tmp_path / "headwayd.log"
    with daemon(tmp_path, "--config", str(config), "--log-file", str(log)) as (process, base):
        assert httpx.get(f"{base}/v1/tasks/at-info").status_code == 404
        wait_for_count(log, " path=/v1/tasks/at-info ", 1, process)

        # warn: requests are no longer logged; the body limit of the file waits for a restart.
        config.write_text("log-level = warn\nmax-body-bytes = 2048\n")
        process.send_signal(signal.SIGHUP)
        wait_for_count(log, "event=reload.finished", 1, process)
        big = httpx.post(f"{base}/v1/tasks", json={"id": "big", "name": "x" * 100, "metadata": {"pad": "y" * 3000}})
        assert big.status_code != 413, "the body limit in effect is still the one of the start"
        assert httpx.get(f"{base}/v1/tasks/at-warn").status_code == 404

        # debug: shown again (no line is logged only at debug: requests stand for it).
        config.write_text("log-level = debug\nmax-body-bytes = 2048\n")
        process.send_signal(signal.SIGHUP)
        wait_for_count(log, "event=reload.finished", 2, process)
        assert httpx.get(f"{base}/v1/tasks/at-debug").status_code == 404

        # A file that no longer parses changes nothing: still debug.
        config.write_text("log-level = debug\nlog-level loud\n")
        process.send_signal(signal.SIGHUP)
        wait_for_count(log, "event=reload.finished", 3, process)
        assert httpx.get(f"{base}/v1/tasks/after-bad-file").status_code == 404

        # Back to info: shown.
        config.write_text("log-level = info\n")
        process.send_signal(signal.SIGHUP)
        wait_for_count(log, "event=reload.finished", 4, process)
        assert httpx.get(f"{base}/v1/tasks/at-info-again").status_code == 404
        stop(process)

    text = log.read_text()
    for path in ["/v1/tasks/at-info", "/v1/tasks/at-debug", "/v1/tasks/after-bad-file", "/v1/tasks/at-info-again"]:
        assert len(request_lines(text, path)) == 1, (path, text)
    assert request_lines(text, "/v1/tasks/at-warn") == [], text
    assert request_lines(text, "/v1/tasks") == [], "the POST was made at warn"
    reloads = [line.split(" event=reload.finished ")[1] for line in text.splitlines() if "event=reload.finished" in line]
    assert reloads == ["log_file=reopened config=reread tls=off log_level=warn",
                       "log_file=reopened config=reread tls=off log_level=debug",
                       "log_file=reopened config=kept tls=off log_level=debug",
                       "log_file=reopened config=reread tls=off log_level=info"], text
    assert text.count("level=warn event=config.restart_needed setting=max-body-bytes ") == 2, text
    assert (f'level=error event=config.reload_failed file={config} error="{config}:2: '
            "expected 'name = value', not 'log-level loud'\"") in text, text
    assert (tmp_path / "stderr.log").read_text() == "", "every line went to the log file"


def test_log_rotation_by_move_and_sighup(tmp_path):
    log = tmp_path / "headwayd.log"
    rotated = tmp_path / "headwayd.log.1"
    with daemon(tmp_path, "--log-file", str(log)) as (process, base):
        assert httpx.get(f"{base}/v1/tasks/before-rotation").status_code == 404
        wait_for_count(log, " path=/v1/tasks/before-rotation ", 1, process)
        os.rename(log, rotated)
        process.send_signal(signal.SIGHUP)
        wait_for_count(log, "event=reload.finished log_file=reopened", 1, process)
        assert httpx.get(f"{base}/v1/tasks/after-rotation").status_code == 404
        wait_for_count(log, " path=/v1/tasks/after-rotation ", 1, process)

        # The path cannot be opened any more (a directory stands there): the lines keep
        # going to the file opened before, which says so.
        os.rename(log, tmp_path / "headwayd.log.2")
        log.mkdir()
        process.send_signal(signal.SIGHUP)
        wait_for_count(tmp_path / "headwayd.log.2", "event=reload.finished log_file=kept", 1, process)
        assert httpx.get(f"{base}/v1/tasks/after-failed-reopen").status_code == 404
        stop(process)

    old, new, kept = rotated.read_text(), (tmp_path / "headwayd.log.2").read_text(), log
    assert request_lines(old, "/v1/tasks/before-rotation") and not request_lines(old, "/v1/tasks/after-rotation"), old
    assert request_lines(new, "/v1/tasks/after-rotation") and not request_lines(new, "/v1/tasks/before-rotation"), new
    assert "level=error event=log.reopen_failed" in new and "Is a directory" in new, new
    assert request_lines(new, "/v1/tasks/after-failed-reopen"), new
    assert "event=server.stopped" in new and list(kept.iterdir()) == []
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "headwayd.log.2").st_mode) == 0o640 & ~umask


def test_bad_configuration_or_log_file_at_start(tmp_path):
    config = tmp_path / "headwayd.conf"
    config.write_text("log-level = info\n\nmax-depth = deep\n")
    started = subprocess.run([HEADWAYD, "--config", str(config), "--db", str(tmp_path / "h.db")],
                             capture_output=True, text=True, timeout=20)
    assert started.returncode == 64
    assert started.stderr.startswith(
        f"headwayd: {config}:3: --max-depth must be a whole number from 1 to 10000, not 'deep'\n"), started.stderr
    started = subprocess.run([HEADWAYD, "--log-file", str(tmp_path / "missing" / "headwayd.log"),
                              "--listen", "127.0.0.1:0", "--db", str(tmp_path / "h.db")],
                             capture_output=True, text=True, timeout=20)
    assert started.returncode == 1
    assert started.stderr == (f"headwayd: cannot start: cannot open the log file {tmp_path}/missing/headwayd.log: "
                              "No such file or directory\n")
    assert not (tmp_path / "h.db").exists(), "nothing was created"


def test_a_second_signal_during_a_slow_stop_ends_it_at_once(tmp_path):
    """A request whose body never comes keeps the stop waiting; a SIGHUP then changes
    nothing, and a SIGINT ends the daemon at once (exit status 128 + 2)."""
    log = tmp_path / "headwayd.log"
    with daemon(tmp_path, "--log-file", str(log)) as (process, base):
        assert httpx.post(f"{base}/v1/tasks", json={"id": "kept", "name": "Kept"}).status_code == 201
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=20) as unfinished:
            unfinished.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 100\r\nExpect: 100-continue\r\n\r\n")
            assert unfinished.recv(100).startswith(b"HTTP/1.1 100"), "the server has begun the request"
            process.send_signal(signal.SIGTERM)
            wait_for_count(log, "event=server.stopping", 1, process)
            process.send_signal(signal.SIGHUP)
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=20) == 128 + signal.SIGINT
    text = log.read_text()
    assert 'level=warn event=signal.received signal=SIGINT action="stopping at once"' in text, text
    assert "event=reload.finished" not in text and "event=server.stopped" not in text, text
    with daemon(tmp_path) as (process, base):
        assert httpx.get(f"{base}/v1/tasks/kept").status_code == 200, "what was acknowledged is kept"
        stop(process)
