"""The webhook formats against real receivers: e-mail delivered to a real SMTP server
(aiosmtpd on loopback) and read back, headers, UTF-8 subject and body; the HTTP formats
(discord, ntfy, telegram, pagerduty) posted to a loopback receiver where their services
expect them; an alert's context (parents, the last 20 output lines, time ran, the page's
link) in the delivery, the same at every attempt; each format's missing fields refused
at creation with nothing made, and its secrets kept out of listings."""
import email
import email.policy
import json
import threading

import httpx
import pytest
from aiosmtpd.controller import Controller

from conftest import free_port, run_headwayd
from test_webhooks import (FAST_RETRIES, PATIENCE, create_webhook, database, make_token, receiving,  # noqa: F401
                           wait_for_state)

PUBLIC = ["--public-url", "https://headway.example.com"]


class Mailbox:
    """An SMTP server on loopback (aiosmtpd) that keeps every message it accepts, or
    answers DATA with the next of `replies` (the last one repeats)."""

    def __init__(self, replies=("250 OK",)):
        self.replies = list(replies)
        self.messages = []
        self.answered = 0
        self.changed = threading.Condition()
        self.port = free_port()
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port)

    async def handle_DATA(self, server, session, envelope):
        with self.changed:
            reply = self.replies[min(self.answered, len(self.replies) - 1)]
            self.answered += 1
            if reply.startswith("250"):
                self.messages.append(envelope)
            self.changed.notify_all()
        return reply

    def wait_for(self, count):
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.messages) >= count, timeout=PATIENCE), \
                f"{len(self.messages)} of {count} messages arrived"
            return list(self.messages)

    def __enter__(self):
        self.controller.start()
        return self

    def __exit__(self, *exception):
        self.controller.stop()


def make_failing_task(base, output_lines=25):
    """A task `db-3` under `nightly` › `db`, with `output_lines` lines of output, failed."""
    for body in [{"id": "nightly", "name": "Nightly"}, {"id": "db", "name": "Databases", "parent_id": "nightly"},
                 {"id": "db-3", "name": "Sauvegarde nocturne — base 3", "parent_id": "db", "total": 10}]:
        assert httpx.post(f"{base}/v1/tasks", json=body).status_code == 201
    lines = [f"line {index}" for index in range(output_lines)]
    assert httpx.post(f"{base}/v1/tasks/db-3/progress", json={"completed": 4, "output": lines}).status_code == 200
    assert httpx.post(f"{base}/v1/tasks/db-3/finish", json={"outcome": "failed", "message": "disk full"}).status_code == 200


def test_an_email_reaches_a_real_smtp_server(tmp_path, database):
    with Mailbox() as mailbox, run_headwayd(tmp_path, *FAST_RETRIES, *PUBLIC, db=database) as base:
        reply = create_webhook(base, {"url": f"smtp://127.0.0.1:{mailbox.port}", "events": ["task.finished"],
                                      "format": "email", "mail_from": "headway@example.com",
                                      "mail_to": ["ops@example.com", "dba@example.org"]})
        assert reply.status_code == 201, reply.text
        webhook = reply.json()
        assert webhook["mail_to"] == ["ops@example.com", "dba@example.org"]
        make_failing_task(base)
        [envelope] = mailbox.wait_for(1)
        assert envelope.mail_from == "headway@example.com"
        assert envelope.rcpt_tos == ["ops@example.com", "dba@example.org"]
        message = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        assert message["Subject"] == "[Headway] Sauvegarde nocturne — base 3 failed: disk full — 40%, 4 of 10"
        assert message["From"] == "headway@example.com" and message["To"] == "ops@example.com, dba@example.org"
        [delivery] = wait_for_state(base, webhook["id"], 1, "delivered")
        assert message["Message-ID"] == f"<{delivery['id']}@example.com>"
        assert message["Date"].datetime is not None and message["Auto-Submitted"] == "auto-generated"
        assert message.get_content_type() == "text/plain" and message.get_content_charset() == "utf-8"
        body = message.get_content()
        assert body.startswith("Sauvegarde nocturne — base 3 failed: disk full")
        assert "Parents: Nightly › Databases" in body
        assert "Page: https://headway.example.com/#task=db-3" in body
        lines = body.splitlines()
        assert "Last 20 lines of output:" in lines and "    line 24" in lines
        assert "    line 5" in lines and "    line 4" not in lines
        assert delivery["status_code"] == 250
        # The password-less URL is listed as it is; the recipients are not secrets.
        listed = httpx.get(f"{base}/v1/webhooks").json()["webhooks"][0]
        assert listed["url"] == f"smtp://127.0.0.1:{mailbox.port}" and listed["mail_from"] == "headway@example.com"


def test_an_smtp_refusal_fails_and_a_temporary_one_is_retried(tmp_path):
    with Mailbox(["451 try later", "250 OK"]) as later, Mailbox(["550 no such user"]) as never, \
            run_headwayd(tmp_path, *FAST_RETRIES) as base:
        ids = []
        for mailbox in (later, never):
            reply = create_webhook(base, {"url": f"smtp://127.0.0.1:{mailbox.port}", "events": ["task.created"],
                                          "format": "email", "mail_from": "h@example.com", "mail_to": ["o@example.com"]})
            assert reply.status_code == 201, reply.text
            ids.append(reply.json()["id"])
        assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
        [retried] = wait_for_state(base, ids[0], 1, "delivered")
        assert retried["attempts"] == 2 and retried["status_code"] == 250
        assert len(later.wait_for(1)) == 1
        [failed] = wait_for_state(base, ids[1], 1, "failed")
        assert failed["attempts"] == 1 and failed["status_code"] == 550 and "SMTP 550" in failed["error"]


def test_the_context_is_built_once_and_sent_the_same_at_every_attempt(tmp_path, database):
    with receiving([500, 200]) as receiver, run_headwayd(tmp_path, *FAST_RETRIES, *PUBLIC, db=database) as base:
        webhook = create_webhook(base, {"url": receiver.url, "events": ["task.finished"]}).json()
        make_failing_task(base)
        first, second = receiver.wait_for(2)
        assert first["body"] == second["body"]
        context = json.loads(first["body"])["context"]
        assert context["parents"] == [{"id": "nightly", "name": "Nightly"}, {"id": "db", "name": "Databases"}]
        assert context["output"] == [f"line {index}" for index in range(5, 25)]
        assert context["url"] == "https://headway.example.com/#task=db-3"
        assert 0 <= context["ran_seconds"] < PATIENCE
        wait_for_state(base, webhook["id"], 1, "delivered")


def test_a_stall_carries_the_context_and_a_success_does_not(tmp_path):
    with receiving() as receiver, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        create_webhook(base, {"url": receiver.url, "events": ["task.stalled", "task.finished"], "format": "slack"})
        assert httpx.post(f"{base}/v1/tasks", json={"id": "s", "name": "Sync", "stall_timeout_seconds": 1}).status_code == 201
        assert httpx.post(f"{base}/v1/tasks/s/progress", json={"output": ["rsync: connection reset"]}).status_code == 200
        [stalled] = receiver.wait_for(1)
        text = json.loads(stalled["body"])["text"]
        assert text.startswith("Sync stalled: no signal for 1 s\nRan: ")
        assert text.endswith("```\nrsync: connection reset\n```")
        assert httpx.post(f"{base}/v1/tasks/s/finish", json={"outcome": "succeeded"}).status_code == 200
        assert json.loads(receiver.wait_for(2)[1]["body"]) == {"text": "Sync succeeded"}


def test_each_http_format_posts_where_its_service_expects(tmp_path):
    with receiving() as receiver, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        base_url = receiver.url.removesuffix("/hook")
        made = {}
        for format, extra, url in [
            ("discord", {}, f"{base_url}/api/webhooks/1/tok"),
            ("ntfy", {}, f"{base_url}/ntfy/backups"),
            ("telegram", {"chat_id": -1001234}, f"{base_url}/bot1:secret/sendMessage"),
            ("pagerduty", {"routing_key": "R0123456789abcdef0123456789abcde"}, f"{base_url}/v2/enqueue"),
        ]:
            reply = create_webhook(base, {"url": url, "events": ["task.stalled", "task.finished"], "format": format, **extra})
            assert reply.status_code == 201, reply.text
            made[format] = reply.json()
        assert made["pagerduty"]["routing_key"] == "R0123456789abcdef0123456789abcde"
        listed = {w["format"]: w for w in httpx.get(f"{base}/v1/webhooks").json()["webhooks"]}
        assert "routing_key" not in listed["pagerduty"] and listed["telegram"]["chat_id"] == "-1001234"
        assert listed["telegram"]["url"] == f"{base_url}/bot1:…/sendMessage"
        assert listed["discord"]["url"] == f"{base_url}/api/webhooks/1/…"
        assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T", "stall_timeout_seconds": 1}).status_code == 201
        requests = receiver.wait_for(4)
        assert httpx.post(f"{base}/v1/tasks/t/finish", json={"outcome": "succeeded"}).status_code == 200
        requests = receiver.wait_for(8)
        by_path = {}
        for request in requests:
            by_path.setdefault(request["path"], []).append(json.loads(request["body"]))
        discord = by_path["/api/webhooks/1/tok"]
        assert discord[0]["content"] == "T stalled: no signal for 1 s" and discord[0]["allowed_mentions"] == {"parse": []}
        # ntfy takes JSON at its root, the topic in the body.
        ntfy = by_path["/ntfy/"]
        assert [n["topic"] for n in ntfy] == ["backups", "backups"] and [n["priority"] for n in ntfy] == [4, 3]
        telegram = by_path["/bot1:secret/sendMessage"]
        assert telegram[0]["chat_id"] == -1001234 and telegram[0]["parse_mode"] == "HTML"
        pagerduty = by_path["/v2/enqueue"]
        assert [p["event_action"] for p in pagerduty] == ["trigger", "resolve"]
        assert {p["dedup_key"] for p in pagerduty} == {f"headway:{made['pagerduty']['id']}:t"}


@pytest.mark.parametrize("body, field", [
    ({"url": "https://api.telegram.org/bot1:x/sendMessage", "events": ["task.stalled"], "format": "telegram"}, "chat_id"),
    ({"url": "https://events.pagerduty.com/v2/enqueue", "events": ["task.stalled"], "format": "pagerduty"}, "routing_key"),
    ({"url": "https://events.pagerduty.com/v2/enqueue", "events": ["task.updated"], "format": "pagerduty",
      "routing_key": "k"}, "events"),
    ({"url": "smtps://mail.example.com", "events": ["task.stalled"], "format": "email", "mail_from": "h@example.com"},
     "mail_to"),
    ({"url": "https://mail.example.com/", "events": ["task.stalled"], "format": "email", "mail_from": "h@example.com",
      "mail_to": ["o@example.com"]}, "url"),
    ({"url": "smtp://mail.example.com", "events": ["task.stalled"], "format": "email", "mail_from": "h@example.com",
      "mail_to": ["o@example.com>\r\nRCPT TO:<x@y.z"]}, "mail_to"),
    ({"url": "https://ntfy.sh/", "events": ["task.stalled"], "format": "ntfy"}, "url"),
])
def test_a_format_missing_its_fields_is_refused_with_nothing_made(tmp_path, body, field):
    admin = make_token(tmp_path, "admin")
    auth = {"Authorization": f"Bearer {admin}"}
    with run_headwayd(tmp_path) as base:
        reply = create_webhook(base, body, token=admin)
        assert reply.status_code == 422, reply.text
        problem = reply.json()
        assert problem["code"] == "webhook_format_invalid" and field in [e["field"] for e in problem["errors"]], problem
        assert httpx.get(f"{base}/v1/webhooks", headers=auth).json() == {"webhooks": []}


def test_an_smtp_host_is_checked_like_any_other(tmp_path):
    # Without --webhook-allow-private, a mail server on loopback is refused like a URL.
    with run_headwayd(tmp_path) as base:
        reply = create_webhook(base, {"url": "smtp://127.0.0.1:25", "events": ["task.stalled"], "format": "email",
                                      "mail_from": "h@example.com", "mail_to": ["o@example.com"]})
        assert reply.status_code == 422 and reply.json()["code"] == "webhook_url_refused", reply.text


def test_an_smtp_password_is_never_listed(tmp_path):
    with Mailbox() as mailbox, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        reply = create_webhook(base, {"url": f"smtps://alerts:s3cret@127.0.0.1:{mailbox.port}", "events": ["task.stalled"],
                                      "format": "email", "mail_from": "h@example.com", "mail_to": ["o@example.com"]})
        assert reply.status_code == 201, reply.text
        listed = httpx.get(f"{base}/v1/webhooks").text
        assert "s3cret" not in listed and f"smtps://alerts:…@127.0.0.1:{mailbox.port}" in listed
