"""Webhooks attacked: what a token holder, a reporter or a hostile receiver could make the
daemon do that it should not. Each test here once failed against the daemon it describes.
A real daemon on loopback (`--webhook-allow-private`: the receivers are on loopback) posts
to a real `http.server` receiver (`test_webhooks.Receiver`)."""
import json
import socket
import threading
import time

import httpx

from conftest import run_headwayd
from test_webhooks import FAST_RETRIES, PATIENCE, create_webhook, deliveries, receiving, wait_for_state


def test_a_task_name_cannot_mention_a_slack_channel_or_hide_a_link(tmp_path):
    # A reporter names its task; the Slack line must show that name as written, not as
    # Slack markup: `<!channel>` would notify everyone in the channel and `<url|text>`
    # would show a link whose target the reader does not see.
    name = "<!channel> backup & restore <https://evil.example/login|see the log>"
    with receiving() as receiver, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        reply = create_webhook(base, {"url": receiver.url, "events": ["task.created", "task.finished"],
                                      "format": "slack"})
        assert reply.status_code == 201, reply.text
        assert httpx.post(f"{base}/v1/tasks", json={"id": "b-1", "name": name}).status_code == 201
        assert httpx.post(f"{base}/v1/tasks/b-1/finish",
                          json={"outcome": "failed", "message": "see <@U024BE7LH> now"}).status_code == 200
        created, finished = receiver.wait_for(2)
        escaped = "&lt;!channel&gt; backup &amp; restore &lt;https://evil.example/login|see the log&gt;"
        assert json.loads(created["body"]) == {"text": f"{escaped} started"}
        assert json.loads(finished["body"]) == {"text": f"{escaped} failed: see &lt;@U024BE7LH&gt; now"}
        wait_for_state(base, reply.json()["id"], 2, "delivered")


def test_a_yes_followed_by_an_endless_body_is_a_delivery(tmp_path):
    # The receiver answers 200 at once, then sends a body that never ends (until the
    # daemon hangs up, or for PATIENCE seconds). The answer was yes: the delivery is
    # delivered, once, not timed out and posted again for as long as retries last.
    accepted = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        def answer():
            connection, _ = server.accept()
            with connection:
                accepted.append(connection.recv(65536))
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n")
                until = time.monotonic() + PATIENCE
                try:
                    while time.monotonic() < until:
                        connection.sendall(b"x" * 65536)
                except OSError:
                    pass  # the daemon hung up: what it should do

        sender = threading.Thread(target=answer, daemon=True)
        sender.start()
        port = server.getsockname()[1]
        with run_headwayd(tmp_path, *FAST_RETRIES, "--webhook-timeout", "2", "--webhook-retry-for", "1s") as base:
            webhook = create_webhook(base, {"url": f"http://127.0.0.1:{port}/hook", "events": ["task.created"]}).json()
            assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
            for _ in range(PATIENCE * 20):
                [delivery] = deliveries(base, webhook["id"]) or [{"state": "pending"}]
                if delivery["state"] != "pending":
                    break
                time.sleep(0.05)
            assert delivery["state"] == "delivered" and delivery["status_code"] == 200, delivery
            assert delivery["attempts"] == 1 and len(accepted) == 1
        sender.join(timeout=PATIENCE)


def test_a_port_with_a_sign_is_refused_at_creation(tmp_path):
    # `:+8080` is not a port libcurl takes: accepted, the webhook would fail every
    # delivery. Refused at creation instead, with nothing made.
    with receiving() as receiver, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        for url in [f"http://127.0.0.1:+{receiver.port}/hook", f"http://[::1]:+{receiver.port}/hook"]:
            reply = create_webhook(base, {"url": url, "events": ["task.created"]})
            assert reply.status_code == 422, reply.text
            assert reply.json()["code"] == "webhook_url_refused"
        assert httpx.get(f"{base}/v1/webhooks").json()["webhooks"] == []
