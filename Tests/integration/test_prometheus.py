"""A real Prometheus server (Debian's `prometheus`) scrapes headwayd's /metrics with a
`read` token: its target is up and PromQL sees the running-tasks gauge."""
import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from conftest import HEADWAYD, free_port, run_headwayd, wait_for_port


def call(base, method, path, body=None, token=None):
    request = urllib.request.Request(base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.status, reply.read()


def query(prometheus, promql):
    """The vector a PromQL instant query returns."""
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as reply:
        answer = json.load(reply)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def is_ready(prometheus):
    """Whether Prometheus' readiness endpoint answers 200 (it is 503 while the TSDB opens)."""
    try:
        with urllib.request.urlopen(f"{prometheus}/-/ready", timeout=10) as reply:
            return reply.status == 200
    except urllib.error.HTTPError as error:
        if error.code == 503:
            return False
        raise


def wait_for(what, probe, seconds=60):
    """Polls `probe` until it returns something true, at most `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            assert value, f"{what}: not within {seconds} s"
            return value
        time.sleep(0.25)


def test_prometheus_scrapes_the_daemon(tmp_path):
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    daemon_dir = tmp_path / "daemon"
    daemon_dir.mkdir()
    database = daemon_dir / "headway.db"

    def made(scope):
        """A new token's secret (printed alone on stdout)."""
        return subprocess.run([HEADWAYD, "token", "create", "--scope", scope, "--name", scope, "--db", str(database)],
                              check=True, capture_output=True, text=True).stdout.strip()

    runner = made("report")
    reader = made("read")
    (tmp_path / "token").write_text(reader)

    with run_headwayd(daemon_dir) as base:
        for task in ["a", "b", "c"]:
            assert call(base, "POST", "/v1/tasks", {"id": task, "name": task, "total": 10}, runner)[0] == 201
        assert call(base, "POST", "/v1/tasks/a/progress", {"completed": 3}, runner)[0] == 200
        assert call(base, "POST", "/v1/tasks/c/finish", {"outcome": "succeeded"}, runner)[0] == 200

        port = free_port()
        target = base.removeprefix("http://")
        (tmp_path / "prometheus.yml").write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: headway
    authorization:
      credentials_file: {tmp_path / "token"}
    static_configs:
      - targets: ["{target}"]
""")
        log = open(tmp_path / "prometheus.log", "w")
        server = subprocess.Popen(
            [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--web.listen-address=127.0.0.1:{port}",
             f"--storage.tsdb.path={tmp_path / 'data'}"],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(port, server, "prometheus")
            prometheus = f"http://127.0.0.1:{port}"
            # Prometheus listens before its storage is open and answers 503 until then.
            wait_for("Prometheus ready", lambda: is_ready(prometheus))
            up = wait_for("up == 1", lambda: [r for r in query(prometheus, 'up{job="headway"}') if r["value"][1] == "1"])
            assert len(up) == 1
            running = wait_for("the running-tasks gauge",
                               lambda: query(prometheus, 'sum(headway_tasks{job="headway",state="running"})'))
            assert running[0]["value"][1] == "2", running
            assert query(prometheus, 'headway_tasks{state="succeeded",mode="quantified"}')[0]["value"][1] == "1"
            accepted = query(prometheus, 'sum(headway_updates_accepted_total)')
            assert accepted[0]["value"][1] == "2", accepted
            build = query(prometheus, "headway_build_info")
            assert build[0]["metric"]["version"], build
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=20)
            log.close()
