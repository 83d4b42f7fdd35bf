"""deploy/nginx/headway-tls.conf as shipped: nginx terminates TLS in front of headwayd,
which runs with tokens and --public-url. Runners and dashboards reach it over HTTPS; the
secret an EventSource must put in the query never reaches nginx's access log."""
import json
import ssl
import subprocess
import time

import httpx

from conftest import HEADWAYD, free_port, run_headwayd, run_nginx


def make_certificate(directory):
    """A self-signed certificate for localhost and 127.0.0.1, made with openssl."""
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def test_headwayd_behind_nginx_with_tls(tmp_path):
    cert, key = make_certificate(tmp_path)
    daemon_directory = tmp_path / "daemon"
    daemon_directory.mkdir()
    secret = subprocess.run([HEADWAYD, "token", "create", "--scope", "admin", "--name", "ops",
                             "--db", str(daemon_directory / "headway.db")],
                            check=True, capture_output=True, text=True).stdout.strip()
    assert secret.startswith("hw_") and len(secret) == 46
    https_port, http_port = free_port(), free_port()
    public = f"https://localhost:{https_port}"
    with run_headwayd(daemon_directory, "--public-url", public) as daemon:
        # The shipped site with the test's ports, name and files.
        replacements = {
            "server 127.0.0.1:8080;": f"server {daemon.removeprefix('http://')};",
            "listen 80;": f"listen 127.0.0.1:{http_port};",
            "listen 443 ssl http2;": f"listen 127.0.0.1:{https_port} ssl http2;",
            "server_name headway.example.com;": "server_name localhost;",
            "/etc/ssl/headway/fullchain.pem": str(cert),
            "/etc/ssl/headway/privkey.pem": str(key),
            "/var/log/nginx/headway.access.log": str(tmp_path / "nginx/logs/headway.access.log"),
        }
        with run_nginx(tmp_path / "nginx", "headway-tls.conf", replacements, https_port):
            # Plain HTTP is sent to HTTPS.
            redirect = httpx.get(f"http://localhost:{http_port}/v1/tasks")
            assert redirect.status_code == 308
            assert redirect.headers["location"] == "https://localhost/v1/tasks"

            with httpx.Client(base_url=public, verify=ssl.create_default_context(cafile=str(cert))) as client:
                refused = client.get("/v1/tasks")
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"].startswith("Bearer")
                assert refused.json()["code"] == "token_missing"

                auth = {"Authorization": f"Bearer {secret}"}
                # A page of the public URL is the daemon's own: its POST is accepted.
                made = client.post("/v1/tasks", json={"id": "backup", "name": "Nightly backup", "total": 10},
                                   headers={**auth, "Origin": public})
                assert made.status_code == 201, made.text
                assert client.post("/v1/tasks/backup/progress", json={"completed": 4}, headers=auth).status_code == 200

                # The event stream with the secret in its query, as an EventSource sends it.
                data = None
                with client.stream("GET", f"/v1/events?task=backup&access_token={secret}") as stream:
                    assert stream.status_code == 200
                    assert stream.headers["content-type"].startswith("text/event-stream")
                    for line in stream.iter_lines():
                        if line.startswith("data:"):
                            data = json.loads(line.removeprefix("data:"))
                            break
                assert data is not None and [(t["id"], t["completed"]) for t in data["tasks"]] == [("backup", 4)]

            # nginx writes a request's line once it sees the client gone, some time after
            # the stream above closed; stopped first, it would end the request unlogged.
            access_log_path = tmp_path / "nginx/logs/headway.access.log"
            deadline = time.monotonic() + 10
            while "GET /v1/events " not in access_log_path.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)

    access_log = access_log_path.read_text()
    assert "GET /v1/events " in access_log, access_log
    assert secret not in access_log and secret[3:] not in access_log
    daemon_log = (daemon_directory / "headwayd.log").read_text()
    assert "path=/v1/events" in daemon_log
    assert secret[3:] not in daemon_log
