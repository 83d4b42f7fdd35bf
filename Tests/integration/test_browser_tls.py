"""A real headless Chromium follows a task over headwayd's own TLS with an EventSource,
the token in `access_token=` (EventSource cannot send headers), from a page of another
origin allowed by --cors-origin; revoking the token ends the stream for good."""
import pathlib
import ssl
import subprocess
import time

import httpx
from selenium.webdriver.support.ui import WebDriverWait

from conftest import HEADWAYD, run_headwayd, serve_directory
from test_nginx_tls import make_certificate

PAGES = pathlib.Path(__file__).resolve().parent / "pages"


def test_an_event_source_over_tls_with_an_access_token(chromium, tmp_path):
    cert, key = make_certificate(tmp_path)
    directory = tmp_path / "daemon"
    directory.mkdir()
    database = str(directory / "headway.db")
    admin = subprocess.run([HEADWAYD, "token", "create", "--scope", "admin", "--name", "ops", "--db", database],
                           check=True, capture_output=True, text=True).stdout.strip()
    with serve_directory(PAGES) as site, \
            run_headwayd(directory, "--tls-cert", str(cert), "--tls-key", str(key), "--cors-origin", site,
                         scheme="https") as daemon, \
            httpx.Client(base_url=daemon, verify=ssl.create_default_context(cafile=str(cert)),
                         headers={"Authorization": f"Bearer {admin}"}) as client:
        made = client.post("/v1/tokens", json={"name": "wall screen", "scopes": ["read"]})
        assert made.status_code == 201, made.text
        reader, reader_id = made.json()["secret"], made.json()["id"]
        assert client.post("/v1/tasks", json={"id": "backup", "name": "Nightly backup", "total": 10}).status_code == 201

        # The page trusts the test's certificate only because Chromium runs with
        # --ignore-certificate-errors (chromium_options); the daemon serves nothing but TLS.
        chromium.get(f"{site}/event_source.html?daemon={daemon}&task=backup&token={reader}")
        wait = WebDriverWait(chromium, 15)
        wait.until(lambda d: d.execute_script("return window.state") == "open")
        wait.until(lambda d: len(d.execute_script("return window.seen")) >= 1)
        for completed in (3, 7):
            assert client.post("/v1/tasks/backup/progress", json={"completed": completed}).status_code == 200
        wait.until(lambda d: [e["data"].get("completed") for e in d.execute_script("return window.seen")
                              if e["kind"] == "task.updated"][-1:] == [7])
        seen = chromium.execute_script("return window.seen")
        assert seen[0]["kind"] == "snapshot" and [t["id"] for t in seen[0]["data"]["tasks"]] == ["backup"]
        chromium.save_screenshot(str(tmp_path / "event_source_tls.png"))

        # Revoked: the daemon closes the stream; the browser's reconnection gets 401, so
        # EventSource gives up for good.
        assert client.delete(f"/v1/tokens/{reader_id}").status_code == 204
        wait.until(lambda d: d.execute_script("return window.state") == "closed")
        log = (directory / "headwayd.log").read_text()
        assert reader[3:] not in log
