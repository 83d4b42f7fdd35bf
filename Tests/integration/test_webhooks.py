"""Webhooks against a real receiver: an `http.server` on loopback started by each test,
the daemon run with `--webhook-allow-private` (its receiver is on loopback) and short
retry delays. A stall is delivered once, signed; a receiver that fails is retried with
growing delays, one that refuses or redirects is not; a receiver down while the daemon is
killed with SIGKILL gets every event after the restart; private targets, other schemes
and bad inputs are refused at creation with nothing made, and a private target is
refused again at each attempt."""
import contextlib
import hashlib
import hmac
import json
import signal
import subprocess
import threading
import time
import http.server

import httpx
import pytest

from conftest import HEADWAYD, free_port, run_headwayd, wait_for_port

# Short retries: the first after 200 ms, then 400 ms (no jitter: the gaps must grow).
FAST_RETRIES = ["--webhook-allow-private", "--webhook-retry-base", "0.2", "--webhook-retry-jitter", "none"]
# How long any awaited delivery may take before the test gives up (a bound, not a measure).
PATIENCE = 30


class Receiver:
    """A loopback HTTP server that records every POST (arrival time, path, headers, body)
    and answers each with the next of `statuses` (the last one repeats)."""

    def __init__(self, statuses=(200,), port=0, delay=0):
        self.statuses = list(statuses)
        self.requests = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.changed:
                    status = receiver.statuses[min(len(receiver.requests), len(receiver.statuses) - 1)]
                    receiver.requests.append({"at": time.monotonic(), "path": self.path,
                                              "headers": dict(self.headers), "body": body})
                    receiver.changed.notify_all()
                time.sleep(delay)
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "/redirected")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, count):
        """The requests once at least `count` have arrived (fails after PATIENCE seconds)."""
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.requests) >= count, timeout=PATIENCE), \
                f"{len(self.requests)} of {count} deliveries arrived"
            return list(self.requests)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def receiving(statuses=(200,), port=0, delay=0):
    receiver = Receiver(statuses, port, delay)
    try:
        yield receiver
    finally:
        receiver.close()


def create_webhook(base, body, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{base}/v1/webhooks", json=body, headers=headers)


def deliveries(base, webhook_id):
    reply = httpx.get(f"{base}/v1/webhooks/{webhook_id}/deliveries")
    assert reply.status_code == 200, reply.text
    return reply.json()["deliveries"]


def wait_for_state(base, webhook_id, count, state):
    """The webhook's deliveries once `count` of them are in `state` (the outcome of an
    attempt is stored just after the receiver answered it)."""
    for _ in range(PATIENCE * 20):
        listed = deliveries(base, webhook_id)
        if sum(1 for delivery in listed if delivery["state"] == state) >= count:
            return listed
        time.sleep(0.05)
    raise AssertionError(f"not {count} deliveries {state}: {listed}")


def verify_signature(request, secret):
    """Recomputes `Headway-Signature` from the secret the create reply showed."""
    fields = dict(part.split("=", 1) for part in request["headers"]["Headway-Signature"].split(","))
    expected = hmac.new(secret.encode(), fields["t"].encode() + b"." + request["body"], hashlib.sha256).hexdigest()
    return hmac.compare_digest(fields["v1"], expected)


@pytest.fixture(params=["sqlite", "postgres"])
def database(request):
    """None (a SQLite file) or the URL of a fresh PostgreSQL database."""
    return request.getfixturevalue("postgres_url") if request.param == "postgres" else None


def test_a_stall_is_delivered_once_and_signed(tmp_path, database):
    with receiving() as receiver, run_headwayd(tmp_path, *FAST_RETRIES, db=database) as base:
        reply = create_webhook(base, {"url": receiver.url, "events": ["task.stalled", "task.finished"]})
        assert reply.status_code == 201, reply.text
        webhook = reply.json()
        assert webhook["secret"].startswith("whsec_")
        assert "secret" not in httpx.get(f"{base}/v1/webhooks").json()["webhooks"][0]
        assert httpx.post(f"{base}/v1/tasks", json={"id": "db-3", "name": "Nightly backup of db-3", "total": 1200,
                                                    "unit": "files", "stall_timeout_seconds": 1}).status_code == 201
        assert httpx.post(f"{base}/v1/tasks/db-3/progress", json={"completed": 768}).status_code == 200
        [stalled] = receiver.wait_for(1)
        # Finished after the stall: a webhook's deliveries arrive in order, so a second
        # delivery of the stall would come before this one.
        assert httpx.post(f"{base}/v1/tasks/db-3/finish", json={"outcome": "failed"}).status_code == 200
        requests = receiver.wait_for(2)
        assert [r["headers"]["Headway-Event"] for r in requests] == ["task.stalled", "task.finished"]
        assert verify_signature(stalled, webhook["secret"])
        assert not verify_signature(stalled, webhook["secret"] + "x")
        body = json.loads(stalled["body"])
        assert body["type"] == "task.stalled" and body["task"]["id"] == "db-3" and body["task"]["stalled"] is True
        assert body["id"] == stalled["headers"]["Headway-Delivery"]
        assert stalled["headers"]["Content-Type"] == "application/json"
        assert stalled["headers"]["User-Agent"].startswith("headwayd/")
        listed = wait_for_state(base, webhook["id"], 2, "delivered")
        assert [d["event"] for d in listed] == ["task.finished", "task.stalled"]
        assert all(d["attempts"] == 1 and d["status_code"] == 200 for d in listed)
        assert len(receiver.requests) == 2


def test_overdue_and_too_quick_are_delivered(tmp_path, database):
    """A webhook that asks for `task.overdue` and `task.too_quick` gets each, signed, with
    the task's flags in its body; one that asks for `task.finished` only gets neither."""
    with receiving() as receiver, receiving() as finished_only, \
            run_headwayd(tmp_path, *FAST_RETRIES, db=database) as base:
        reply = create_webhook(base, {"url": receiver.url, "events": ["task.overdue", "task.too_quick"]})
        assert reply.status_code == 201, reply.text
        webhook = reply.json()
        assert create_webhook(base, {"url": finished_only.url, "events": ["task.finished"]}).status_code == 201
        # A backup that "succeeded" in no time, and a job past its one expected second: the
        # daemon's sweeper flags it about a second after its start, on its own.
        assert httpx.post(f"{base}/v1/tasks", json={"id": "backup", "name": "Nightly backup", "min_seconds": 600,
                                                    "stall_timeout_seconds": 3600}).status_code == 201
        assert httpx.post(f"{base}/v1/tasks/backup/finish", json={"outcome": "succeeded"}).status_code == 200
        assert httpx.post(f"{base}/v1/tasks", json={"id": "report", "name": "Monthly report", "expected_seconds": 1,
                                                    "stall_timeout_seconds": 3600}).status_code == 201
        quick, overdue = receiver.wait_for(2)
        assert [r["headers"]["Headway-Event"] for r in (quick, overdue)] == ["task.too_quick", "task.overdue"]
        assert all(verify_signature(r, webhook["secret"]) for r in (quick, overdue))
        quick_body, overdue_body = json.loads(quick["body"]), json.loads(overdue["body"])
        assert quick_body["type"] == "task.too_quick" and quick_body["task"]["too_quick"] is True
        assert quick_body["task"]["state"] == "succeeded" and quick_body["task"]["min_seconds"] == 600
        assert overdue_body["type"] == "task.overdue" and overdue_body["task"]["id"] == "report"
        assert overdue_body["task"]["overdue"] is True and overdue_body["task"]["state"] == "running"
        assert overdue_body["task"]["overdue_since"] is not None
        [finish] = finished_only.wait_for(1)
        assert finish["headers"]["Headway-Event"] == "task.finished"
        assert json.loads(finish["body"])["task"]["too_quick"] is True
        assert [d["event"] for d in wait_for_state(base, webhook["id"], 2, "delivered")] == \
            ["task.overdue", "task.too_quick"]


def test_the_slack_format_is_a_line_for_a_person(tmp_path):
    with receiving() as receiver, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        reply = create_webhook(base, {"url": receiver.url, "events": ["task.finished"], "outcomes": ["failed"],
                                      "format": "slack", "task_prefix": "db-"})
        assert reply.status_code == 201, reply.text
        for id, state in [("other-1", "failed"), ("db-1", "succeeded"), ("db-2", "failed")]:
            assert httpx.post(f"{base}/v1/tasks", json={"id": id, "name": f"Backup {id}", "total": 10}).status_code == 201
            assert httpx.post(f"{base}/v1/tasks/{id}/progress", json={"completed": 4}).status_code == 200
            assert httpx.post(f"{base}/v1/tasks/{id}/finish", json={"outcome": state}).status_code == 200
        [only] = receiver.wait_for(1)
        # The line, then (a failure is an alert) its context: no parents, no output, how long it ran.
        text = json.loads(only["body"])["text"]
        assert text.startswith("Backup db-2 failed — 40%, 4 of 10\nRan: ") and text.count("\n") == 1
        # Nothing else was queued for it: the listing holds that one delivery.
        assert [d["id"] for d in wait_for_state(base, reply.json()["id"], 1, "delivered")] == \
            [only["headers"]["Headway-Delivery"]]


def test_a_failing_receiver_is_retried_with_growing_delays(tmp_path, database):
    with receiving([500, 500, 200]) as receiver, run_headwayd(tmp_path, *FAST_RETRIES, db=database) as base:
        webhook = create_webhook(base, {"url": receiver.url, "events": ["task.created"]}).json()
        assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
        first, second, third = receiver.wait_for(3)
        # The retries wait at least 200 ms, then 400 ms (never sooner, however loaded the
        # machine), and the second gap is the longer.
        assert second["at"] - first["at"] >= 0.19 and third["at"] - second["at"] >= 0.39
        assert second["at"] - first["at"] < third["at"] - second["at"]
        assert first["body"] == second["body"] == third["body"]
        assert len({r["headers"]["Headway-Delivery"] for r in (first, second, third)}) == 1
        [delivery] = wait_for_state(base, webhook["id"], 1, "delivered")
        assert delivery["attempts"] == 3 and delivery["status_code"] == 200 and delivery["error"] is None
        assert len(receiver.requests) == 3
        metrics = httpx.get(f"{base}/metrics").text
        assert 'headway_webhook_attempts_total{result="retried"} 2' in metrics
        assert 'headway_webhook_attempts_total{result="delivered"} 1' in metrics


@pytest.mark.parametrize("status, error", [(404, "HTTP 404"), (302, "redirect not followed (HTTP 302)")])
def test_a_refusal_or_a_redirect_fails_at_once(tmp_path, status, error):
    with receiving([status, 200]) as receiver, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        webhook = create_webhook(base, {"url": receiver.url, "events": ["task.created"]}).json()
        assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
        [delivery] = wait_for_state(base, webhook["id"], 1, "failed")
        assert delivery["attempts"] == 1 and delivery["status_code"] == status and delivery["error"] == error
        # Given up: the one request was the only one (no retry, no request to the Location).
        assert [r["path"] for r in receiver.requests] == ["/hook"]


def test_webhooks_with_backlogs_are_sent_side_by_side(tmp_path):
    # Two webhooks, each with a backlog (the receiver takes 50 ms a request): each has its
    # own attempt in flight, in its own order; neither waits for the other's backlog.
    with receiving(delay=0.05) as receiver, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        for name in ["a", "b"]:
            reply = create_webhook(base, {"url": f"{receiver.url}/{name}", "events": ["task.created"]})
            assert reply.status_code == 201, reply.text
        for index in range(6):
            assert httpx.post(f"{base}/v1/tasks", json={"id": f"t{index}", "name": "T"}).status_code == 201
        requests = receiver.wait_for(12)
        paths = [r["path"] for r in requests]
        assert sorted(paths) == ["/hook/a"] * 6 + ["/hook/b"] * 6
        assert {"/hook/a", "/hook/b"} <= set(paths[:4]), paths
        for name in ["a", "b"]:
            ids = [json.loads(r["body"])["task"]["id"] for r in requests if r["path"] == f"/hook/{name}"]
            assert ids == [f"t{index}" for index in range(6)], ids


def start(tmp_path, port, *arguments):
    log = open(tmp_path / "headwayd.log", "a")
    process = subprocess.Popen([HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", str(tmp_path / "headway.db"),
                                "--durability", "full", *arguments], stderr=log)
    wait_for_port(port, process, "headwayd")
    return process


def test_a_receiver_down_across_a_sigkill_gets_every_event_after_the_restart(tmp_path):
    port, receiver_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    arguments = ["--webhook-allow-private", "--webhook-retry-base", "0.1"]
    process = start(tmp_path, port, *arguments)
    try:
        # Nothing listens on the receiver's port yet: every attempt is refused, and retried.
        webhook = create_webhook(base, {"url": f"http://127.0.0.1:{receiver_port}/hook",
                                        "events": ["task.created", "task.finished"]}).json()
        for index in range(5):
            assert httpx.post(f"{base}/v1/tasks", json={"id": f"t{index}", "name": "T"}).status_code == 201
            assert httpx.post(f"{base}/v1/tasks/t{index}/finish", json={"outcome": "succeeded"}).status_code == 200
        listed = deliveries(base, webhook["id"])
        assert len(listed) == 10 and all(d["state"] == "pending" for d in listed)
        process.send_signal(signal.SIGKILL)
        process.wait()
        with receiving(port=receiver_port) as receiver:
            process = start(tmp_path, port, *arguments)
            requests = receiver.wait_for(10)
            event_ids = [json.loads(r["body"])["event_id"] for r in requests]
            assert event_ids == sorted(event_ids) and len(set(event_ids)) == 10
            assert {d["event_id"] for d in listed} == set(event_ids)
            wait_for_state(base, webhook["id"], 10, "delivered")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0


def test_a_slow_receiver_gets_each_tasks_latest_update_not_every_one(tmp_path, database):
    # A receiver that takes 300 ms a request; two tasks updated 40 times each as fast as
    # the daemon answers. A task's updates coalesce while one of them waits unsent, so the
    # outbox holds at most two per task (one in flight, one waiting), the receiver gets far
    # fewer than the 80 updates, and the last delivery of each task carries its last progress.
    with receiving(delay=0.3) as receiver, run_headwayd(tmp_path, *FAST_RETRIES, db=database) as base:
        webhook = create_webhook(base, {"url": receiver.url, "events": ["task.updated"]}).json()
        for name in ["a", "b"]:
            assert httpx.post(f"{base}/v1/tasks", json={"id": name, "name": name, "total": 40}).status_code == 201
        most_pending = 0
        with httpx.Client(base_url=base) as client:
            for completed in range(1, 41):
                for name in ["a", "b"]:
                    reply = client.post(f"/v1/tasks/{name}/progress", json={"completed": completed})
                    assert reply.status_code == 200, reply.text
                pending = sum(1 for delivery in deliveries(base, webhook["id"]) if delivery["state"] == "pending")
                most_pending = max(most_pending, pending)
        assert most_pending <= 4

        def latest():
            seen = {}
            for request in receiver.requests:
                task = json.loads(request["body"])["task"]
                seen[task["id"]] = task["completed"]
            return seen

        for _ in range(PATIENCE * 20):
            if latest() == {"a": 40, "b": 40}:
                break
            time.sleep(0.05)
        assert latest() == {"a": 40, "b": 40}
        ids = [request["headers"]["Headway-Delivery"] for request in receiver.requests]
        assert len(ids) == len(set(ids)), ids
        assert len(receiver.requests) < 40
        for request in receiver.requests:
            assert json.loads(request["body"])["id"] == request["headers"]["Headway-Delivery"]


def test_a_deleted_webhook_drops_its_pending_deliveries(tmp_path):
    # Nothing listens at the receiver's port: the deliveries wait, pending.
    with run_headwayd(tmp_path, *FAST_RETRIES) as base:
        webhook = create_webhook(base, {"url": f"http://127.0.0.1:{free_port()}/hook", "events": ["task.created"]}).json()
        for index in range(3):
            assert httpx.post(f"{base}/v1/tasks", json={"id": f"t{index}", "name": "T"}).status_code == 201
        assert len(deliveries(base, webhook["id"])) == 3
        assert "headway_webhook_deliveries_pending 3" in httpx.get(f"{base}/metrics").text
        assert httpx.delete(f"{base}/v1/webhooks/{webhook['id']}").status_code == 204
        assert "headway_webhook_deliveries_pending 0" in httpx.get(f"{base}/metrics").text
        assert httpx.get(f"{base}/v1/webhooks/{webhook['id']}/deliveries").json()["code"] == "webhook_not_found"
        assert httpx.get(f"{base}/v1/webhooks").json() == {"webhooks": []}


def test_a_private_target_is_refused_at_each_attempt_too(tmp_path):
    # Made while private targets were allowed, sent after a restart without: refused
    # after resolving, never posted.
    with receiving() as receiver:
        with run_headwayd(tmp_path, *FAST_RETRIES) as base:
            webhook = create_webhook(base, {"url": receiver.url.replace("127.0.0.1", "localhost"),
                                            "events": ["task.created"]}).json()
        with run_headwayd(tmp_path) as base:
            assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
            [delivery] = wait_for_state(base, webhook["id"], 1, "failed")
            assert "not a public address" in delivery["error"] and delivery["status_code"] is None
        assert receiver.requests == []


def make_token(tmp_path, scope):
    return subprocess.run([HEADWAYD, "token", "create", "--scope", scope, "--name", scope,
                           "--db", str(tmp_path / "headway.db")], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("body, status, code, field", [
    ({"url": "http://127.0.0.1:9/hook", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://localhost:9/hook", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://10.1.2.3/hook", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://100.64.0.1/hook", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://169.254.169.254/latest", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://[::1]:9/hook", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://[fd00::1]/hook", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://[::ffff:192.168.1.1]/hook", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://0.0.0.0/hook", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "ftp://93.184.216.34/hook", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "file:///etc/passwd", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://user:pw@93.184.216.34/", "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://93.184.216.34/" + "a" * 2030, "events": ["task.stalled"]}, 422, "webhook_url_refused", "url"),
    ({"url": "http://93.184.216.34/", "events": ["task.exploded"]}, 400, "invalid_request", "events"),
    ({"url": "http://93.184.216.34/", "events": []}, 400, "invalid_request", "events"),
    ({"url": "http://93.184.216.34/", "events": ["task.stalled"], "task_prefix": "a b"}, 400, "invalid_request",
     "task_prefix"),
    ({"url": "http://93.184.216.34/", "events": ["task.stalled"], "outcomes": ["failed"]}, 400, "invalid_request",
     "outcomes"),
    ({"url": "http://93.184.216.34/", "events": ["task.finished"], "outcomes": ["running"]}, 400, "invalid_request",
     "outcomes"),
    ({"url": "http://93.184.216.34/", "events": ["task.stalled"], "format": "xml"}, 400, "invalid_request", "format"),
    ({"events": ["task.stalled"]}, 400, "invalid_request", "url"),
    ({"url": "http://93.184.216.34/", "events": ["task.stalled"], "secret": "mine"}, 400, "invalid_request", "secret"),
])
def test_bad_webhooks_are_refused_with_nothing_made(tmp_path, body, status, code, field):
    admin = make_token(tmp_path, "admin")
    with run_headwayd(tmp_path) as base:
        reply = create_webhook(base, body, token=admin)
        assert reply.status_code == status, reply.text
        problem = reply.json()
        assert reply.headers["content-type"] == "application/problem+json"
        assert problem["code"] == code and field in [e["field"] for e in problem["errors"]], problem
        listed = httpx.get(f"{base}/v1/webhooks", headers={"Authorization": f"Bearer {admin}"}).json()
        assert listed == {"webhooks": []}


def test_only_an_admin_token_manages_webhooks(tmp_path):
    admin, reader = make_token(tmp_path, "admin"), make_token(tmp_path, "read")
    body = {"url": "http://93.184.216.34/hook", "events": ["task.stalled"]}
    with run_headwayd(tmp_path) as base:
        assert create_webhook(base, body).json()["code"] == "token_missing"
        assert create_webhook(base, body, token=reader).json()["code"] == "insufficient_scope"
        assert httpx.get(f"{base}/v1/webhooks", headers={"Authorization": f"Bearer {reader}"}).status_code == 403
        auth = {"Authorization": f"Bearer {admin}"}
        assert httpx.get(f"{base}/v1/webhooks", headers=auth).json() == {"webhooks": []}
        made = create_webhook(base, body, token=admin)
        assert made.status_code == 201, made.text
        id = made.json()["id"]
        assert httpx.delete(f"{base}/v1/webhooks/{id}", headers={"Authorization": f"Bearer {reader}"}).status_code == 403
        assert httpx.delete(f"{base}/v1/webhooks/{id}", headers=auth).status_code == 204
        assert httpx.delete(f"{base}/v1/webhooks/{id}", headers=auth).json()["code"] == "webhook_not_found"
        assert httpx.get(f"{base}/v1/webhooks/{id}/deliveries", headers=auth).status_code == 404


def send_test(base, webhook_id, token=None, **kwargs):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    kwargs.setdefault("json", {})
    return httpx.post(f"{base}/v1/webhooks/{webhook_id}/test", headers=headers, timeout=30, **kwargs)


def test_a_test_is_sent_now_signed_answered_and_listed(tmp_path, database):
    """Issue 49 item 4: POST /v1/webhooks/{id}/test posts a sample event in the webhook's
    format, signed, and answers with the outcome; it is listed among the deliveries, and a
    second one within 10 s is refused with Retry-After."""
    with receiving() as receiver, run_headwayd(tmp_path, *FAST_RETRIES, db=database) as base:
        webhook = create_webhook(base, {"url": receiver.url, "events": ["task.finished"], "outcomes": ["failed"],
                                        "format": "slack", "task_prefix": "db-"}).json()
        reply = send_test(base, webhook["id"])
        assert reply.status_code == 200, reply.text
        outcome = reply.json()
        [request] = receiver.wait_for(1)
        assert outcome["state"] == "delivered" and outcome["status_code"] == 200 and outcome["test"] is True
        assert outcome["attempts"] == 1 and outcome["error"] is None and outcome["latency_ms"] >= 0
        assert outcome["event"] == "task.finished" and outcome["event_id"] == 0
        assert request["headers"]["Headway-Test"] == "true"
        assert request["headers"]["Headway-Delivery"] == outcome["id"] and "-test-" in outcome["id"]
        assert verify_signature(request, webhook["secret"])
        assert json.loads(request["body"]) == {
            "text": "Headway test delivery failed: This is a test sent from Headway; no task ran. — 64%, 64 of 100 items"}
        assert deliveries(base, webhook["id"]) == [outcome]
        again = send_test(base, webhook["id"])
        assert again.status_code == 429 and again.json()["code"] == "webhook_test_too_soon", again.text
        assert 1 <= int(again.headers["retry-after"]) <= 10
        assert len(receiver.requests) == 1
        # A real delivery comes after it in the list, the test below it, by time.
        for step in ("", "/finish"):
            body = {"id": "db-1", "name": "Backup"} if not step else {"outcome": "failed"}
            assert httpx.post(f"{base}/v1/tasks{'/db-1' + step if step else ''}", json=body).status_code in (200, 201)
        listed = wait_for_state(base, webhook["id"], 2, "delivered")
        assert [d["test"] for d in listed] == [False, True]


def test_a_failed_test_says_why_and_a_slow_receiver_holds_up_nothing(tmp_path):
    with receiving(statuses=(500,)) as failing, receiving(delay=5) as slow, \
            run_headwayd(tmp_path, *FAST_RETRIES, "--webhook-timeout", "1") as base:
        made = create_webhook(base, {"url": failing.url, "events": ["task.stalled"]}).json()
        outcome = send_test(base, made["id"]).json()
        assert outcome["state"] == "failed" and outcome["status_code"] == 500 and outcome["error"] == "HTTP 500"
        assert outcome["event"] == "task.stalled" and len(failing.requests) == 1
        # Never retried: a test is one attempt.
        assert deliveries(base, made["id"])[0]["attempts"] == 1
        hanging = create_webhook(base, {"url": slow.url, "events": ["task.created"]}).json()
        result = {}
        thread = threading.Thread(target=lambda: result.update(reply=send_test(base, hanging["id"])))
        thread.start()
        slow.wait_for(1)
        # While the test waits for its receiver, the daemon answers and delivers the rest.
        started = time.monotonic()
        assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T"}, timeout=5).status_code == 201
        assert httpx.get(f"{base}/v1/tasks", timeout=5).status_code == 200
        assert time.monotonic() - started < 1
        thread.join(PATIENCE)
        outcome = result["reply"].json()
        assert outcome["state"] == "failed" and outcome["status_code"] is None and "imeout" in outcome["error"], outcome


def test_a_test_is_refused_what_a_delivery_is(tmp_path):
    """The address check applies at the test's attempt too, and bad requests change nothing."""
    with receiving() as receiver:
        with run_headwayd(tmp_path, *FAST_RETRIES) as base:
            webhook = create_webhook(base, {"url": receiver.url.replace("127.0.0.1", "localhost"),
                                            "events": ["task.created"]}).json()
        admin, reader = make_token(tmp_path, "admin"), make_token(tmp_path, "read")
        with run_headwayd(tmp_path) as base:
            assert send_test(base, webhook["id"], token=reader).json()["code"] == "insufficient_scope"
            assert send_test(base, "whk_none", token=admin).json()["code"] == "webhook_not_found"
            refused = send_test(base, webhook["id"], token=admin, json={"url": "http://10.0.0.1/"})
            assert refused.status_code == 400 and refused.json()["code"] == "invalid_request", refused.text
            outcome = send_test(base, webhook["id"], token=admin).json()
            assert outcome["state"] == "failed" and "not a public address" in outcome["error"], outcome
            listed = httpx.get(f"{base}/v1/webhooks/{webhook['id']}/deliveries",
                               headers={"Authorization": f"Bearer {admin}"}).json()["deliveries"]
            assert [d["id"] for d in listed] == [outcome["id"]]
        assert receiver.requests == []
