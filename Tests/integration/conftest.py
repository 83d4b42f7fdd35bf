"""Fixtures that start the real headwayd (and nginx, a static web server, a headless
Chromium) on loopback ports for the tests, and a private PostgreSQL server."""
import contextlib
import functools
import http.server
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from pgserver import PostgresServer

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


@contextlib.contextmanager
def run_headwayd(directory, *arguments, scheme="http", db=None):
    """Runs the daemon on a free port with a fresh database in `directory` (its log in
    `directory`/headwayd.log), with extra `arguments`; yields its base URL (`https` when
    the arguments give it a certificate). `db`, a PostgreSQL URL, replaces the SQLite file."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = open(directory / "headwayd.log", "w")
    process = subprocess.Popen(
        [HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", db or str(directory / "headway.db"),
         "--durability", "normal", "--sse-heartbeat", "1", *arguments],
        stderr=log)
    try:
        wait_for_port(port, process, "headwayd")
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, "headwayd did not stop cleanly"
        log.close()


@pytest.fixture
def headwayd(tmp_path):
    """The daemon on a free port with a fresh database; yields its base URL."""
    with run_headwayd(tmp_path) as base:
        yield base


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    """A private PostgreSQL server (pgserver.py) for the whole session, stopped and removed
    at its end."""
    with PostgresServer(tmp_path_factory.mktemp("postgres")) as server:
        yield server


@pytest.fixture
def postgres_url(postgres, request):
    """A fresh, empty database of the test's own on the session's server (named after the
    test); yields its URL and drops it after the test."""
    name = "test_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40] + "_" + secrets.token_hex(4)
    postgres.create_database(name)
    try:
        yield postgres.url(name)
    finally:
        postgres.drop_database(name)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without a log line per request."""

    def log_message(self, format, *args):
        pass


@contextlib.contextmanager
def serve_directory(directory):
    """A static web server for `directory` on a free loopback port (another origin than
    the daemon's); yields its base URL."""
    handler = functools.partial(QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def chromium_options():
    """Options of a headless Chromium for Selenium (Debian's `chromium`): no sandbox (the
    tests may run as root), and `*.test` names resolved to 127.0.0.1, so a page can be
    loaded under a name of its own that points at this machine, as in DNS rebinding; the
    self-signed certificates the tests make are accepted."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1000,700", "--host-resolver-rules=MAP *.test 127.0.0.1",
                     "--disable-features=HttpsUpgrades", "--ignore-certificate-errors"]:
        options.add_argument(argument)
    return options


@contextlib.contextmanager
def chromium_driver(options=None):
    """A headless Chromium driven by Selenium (Debian's `chromedriver`, no download), with
    `options` (by default `chromium_options()`); quit at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    service = Service(shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(service=service, options=options or chromium_options())
    driver.set_page_load_timeout(15)
    driver.set_script_timeout(15)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium for the whole session; tests load their pages in it."""
    with chromium_driver() as driver:
        yield driver


@contextlib.contextmanager
def run_nginx(prefix, site_file, replacements, port):
    """nginx in the folder `prefix` with one site of deploy/nginx/, its texts `replacements`
    replaced (each must be there: the test follows the file as shipped); waits until it
    listens on `port`, stops it at the end."""
    site = (ROOT / "deploy/nginx" / site_file).read_text()
    for old, new in replacements.items():
        assert old in site, old
        site = site.replace(old, new)
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
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    process = subprocess.Popen([binary, "-p", str(prefix), "-c", str(prefix / "nginx.conf")])
    try:
        wait_for_port(port, process, "nginx")
        yield
    finally:
        process.send_signal(signal.SIGQUIT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def nginx(headwayd, tmp_path):
    """nginx with deploy/nginx/headway.conf in front of headwayd; yields its base URL."""
    port = free_port()
    replacements = {"server 127.0.0.1:8080;": f"server {headwayd.removeprefix('http://')};",
                    "listen 80;": f"listen 127.0.0.1:{port};"}
    with run_nginx(tmp_path / "nginx", "headway.conf", replacements, port):
        yield f"http://127.0.0.1:{port}"
