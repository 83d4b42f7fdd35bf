"""A real headless Chromium against headwayd: a page on another origin cannot cancel a
running task, neither with a plain form nor with fetch(), unless its origin is given to
--cors-origin (and even then not with a form); a name pointed at this machine (DNS
rebinding) is refused."""
import pathlib
import re
import time

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from conftest import run_headwayd, serve_directory

PAGES = pathlib.Path(__file__).resolve().parent / "pages"


def register_running_task(base):
    reply = httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "Copy photos", "total": 100})
    assert reply.status_code == 201, reply.text
    assert httpx.post(f"{base}/v1/tasks/t/progress", json={"completed": 10}).status_code == 200


def task(base):
    reply = httpx.get(f"{base}/v1/tasks/t")
    assert reply.status_code == 200, reply.text
    return reply.json()


def cancel_statuses(log_path, count):
    """The statuses logged for `OPTIONS` and `POST` on the task's cancel path, in order,
    once `count` of them are logged (the log is written every 50 ms; 5 s at most)."""
    deadline = time.monotonic() + 5
    while True:
        lines = [line for line in log_path.read_text().splitlines()
                 if "event=http.request" in line and "path=/v1/tasks/t/cancel" in line]
        statuses = [(re.search(r"method=(\S+)", line)[1], int(re.search(r"status=(\d+)", line)[1]))
                    for line in lines]
        if len(statuses) >= count or time.monotonic() > deadline:
            return statuses
        time.sleep(0.05)


def run_page(driver, site, daemon):
    """Loads the cross-site page against `daemon`; returns what it saw once it is done."""
    driver.get(f"{site}/cross_site.html?daemon={daemon}&task=t")
    WebDriverWait(driver, 15).until(lambda d: d.title == "done")
    return driver.execute_script("return window.outcome")


def test_a_cross_site_page_cannot_cancel_a_task_unless_its_origin_is_allowed(chromium, tmp_path):
    with serve_directory(PAGES) as site:
        # Not allowed: the form is refused for its Origin (403), fetch's preflight too, so
        # the POST itself is never sent.
        with run_headwayd(tmp_path / "closed") as daemon:
            register_running_task(daemon)
            outcome = run_page(chromium, site, daemon)
            assert outcome["form POST"] == "sent; reply not readable"
            assert outcome["fetch JSON POST"] == "refused by the browser (TypeError)"
            frame = chromium.find_element(By.ID, "sink")
            chromium.switch_to.frame(frame)
            assert "origin_not_allowed" in chromium.find_element(By.TAG_NAME, "body").text
            chromium.switch_to.default_content()
            assert cancel_statuses(tmp_path / "closed/headwayd.log", 2) == [("POST", 403), ("OPTIONS", 403)]
            after = task(daemon)
            assert after["state"] == "running" and after["cancel_requested"] is False

        # The page's origin allowed: fetch (JSON, preflighted) cancels and reads the reply;
        # the form still cannot (415: a form cannot say application/json).
        with run_headwayd(tmp_path / "open", "--cors-origin", site) as daemon:
            register_running_task(daemon)
            outcome = run_page(chromium, site, daemon)
            assert outcome["form POST"] == "sent; reply not readable"
            assert outcome["fetch JSON POST"] == "status 202, cancel_requested true, X-Request-Id visible"
            assert cancel_statuses(tmp_path / "open/headwayd.log", 3) == [
                ("POST", 415), ("OPTIONS", 204), ("POST", 202)]
            chromium.save_screenshot(str(tmp_path / "cross_site_allowed.png"))
            assert task(daemon)["cancel_requested"] is True


def test_a_name_pointed_at_the_daemon_is_refused(chromium, tmp_path):
    """DNS rebinding: the browser resolves rebind.test to 127.0.0.1 (see chromium_options),
    so a page of that name is same-origin with the daemon; its requests name that host."""
    with run_headwayd(tmp_path / "daemon") as daemon:
        register_running_task(daemon)
        port = daemon.rsplit(":", 1)[1]
        chromium.get(f"http://rebind.test:{port}/v1/tasks/t")
        body = chromium.find_element(By.TAG_NAME, "body").text
        assert "host_not_allowed" in body and "--public-url" in body
        reply = chromium.execute_async_script("""
            const done = arguments[arguments.length - 1];
            fetch("/v1/tasks/t/cancel", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"})
                .then(r => r.json().then(p => done(`${r.status} ${p.code}`)), e => done(String(e)));
        """)
        assert reply == "400 host_not_allowed"
        after = task(daemon)
        assert after["state"] == "running" and after["cancel_requested"] is False
