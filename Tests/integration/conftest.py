"""Fixtures that start the real headwayd (and nginx) on loopback ports for the tests."""
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEADWAYD = os.environ.get("HEADWAYD", str(ROOT / ".build/debug/headwayd"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, process, what):
    for _ in range(500):
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{what} did not listen on {port}")


@pytest.fixture
def headwayd(tmp_path):
    """The daemon on a free port with a fresh database; yields its base URL."""
    port = free_port()
    log = open(tmp_path / "headwayd.log", "w")
    process = subprocess.Popen(
        [HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", str(tmp_path / "headway.db"),
         "--durability", "normal", "--sse-heartbeat", "1"],
        stderr=log)
    try:
        wait_for_port(port, process, "headwayd")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, "headwayd did not stop cleanly"
        log.close()


@pytest.fixture
def nginx(headwayd, tmp_path):
    """nginx with deploy/nginx/headway.conf in front of headwayd; yields its base URL."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    port = free_port()
    upstream = headwayd.removeprefix("http://")
    site = (ROOT / "deploy/nginx/headway.conf").read_text()
    assert "server 127.0.0.1:8080;" in site and "listen 80;" in site
    site = site.replace("server 127.0.0.1:8080;", f"server {upstream};").replace(
        "listen 80;", f"listen 127.0.0.1:{port};")
    prefix = tmp_path / "nginx"
    for folder in ["logs", "temp"]:
        (prefix / folder).mkdir(parents=True)
    (prefix / "headway.conf").write_text(site)
    (prefix / "nginx.conf").write_text(f"""
daemon off;
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/logs/access.log;
    client_body_temp_path {prefix}/temp/body;
    proxy_temp_path {prefix}/temp/proxy;
    fastcgi_temp_path {prefix}/temp/fastcgi;
    uwsgi_temp_path {prefix}/temp/uwsgi;
    scgi_temp_path {prefix}/temp/scgi;
    include {prefix}/headway.conf;
}}
""")
    process = subprocess.Popen([binary, "-p", str(prefix), "-c", str(prefix / "nginx.conf")])
    try:
        wait_for_port(port, process, "nginx")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGQUIT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
