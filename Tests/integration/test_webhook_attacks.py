"""Webhooks attacked: what a token holder, a reporter or a hostile receiver could make the
daemon do that it should not. Each test here once failed against the daemon it describes.
A real daemon on loopback (`--webhook-allow-private`: the receivers are on loopback) posts
to a real `http.server` receiver (`test_webhooks.Receiver`)."""
import contextlib
import json
import signal
import socket
import threading
import time

import httpx
import pytest

from conftest import free_port, run_headwayd
from test_webhooks import FAST_RETRIES, PATIENCE, create_webhook, deliveries, receiving, start, wait_for_state


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
        # A failure's alert goes on with its context (how long it ran); its first line is the
        # event, and no line of it is Slack markup.
        text = json.loads(finished["body"])["text"]
        assert text.split("\n")[0] == f"{escaped} failed: see &lt;@U024BE7LH&gt; now"
        assert "<" not in text and ">" not in text, text
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


# Hosts that some parser reads as an IPv4 address other than a plain decimal reading, or
# as an address where another sees a name (libcurl 7.88 and glibc's inet_aton: leading
# zeros are octal, 0x is hex, fewer parts fill the rest, one number is all 32 bits), and
# the numbers no parser takes. Where each leads, per parser: WebhookRulesTests.hostReadings.
AMBIGUOUS_HOSTS = [
    "012.9.9.9", "172.032.0.1", "0127.0.0.1", "127.000.000.001", "127.0.0.01", "01.02.03.04", "0x7f.0.0.1",
    "0X7F.1", "0xa.0.0.1", "10.0.0.0x1", "127.1", "127.0.1", "0177.1", "2130706433", "017700000001",
    "0x7f000001", "0", "00", "127.0.0.1.", "1.2.3.4.5", "256.1.1.1", "4294967296", "08.1.1.1", "0x",
    "1e1.1.1.1", "example.123", "1..2.3", "[::ffff:012.1.1.1]", "[::ffff:127.1]", "[::ffff:1.2.3.04]",
]


def test_a_host_any_parser_may_read_as_another_address_is_refused_always(tmp_path):
    # Refused even with private targets allowed: no one can say where such a host leads
    # (the check read 012.9.9.9 as 12.9.9.9, libcurl connected to 10.9.9.9).
    with receiving() as receiver, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        for host in AMBIGUOUS_HOSTS:
            reply = create_webhook(base, {"url": f"http://{host}:{receiver.port}/hook", "events": ["task.created"]})
            assert reply.status_code == 422, f"{host}: {reply.status_code} {reply.text}"
            assert reply.json()["code"] == "webhook_url_refused", host
        assert httpx.get(f"{base}/v1/webhooks").json()["webhooks"] == []
        # The one spelling every parser reads alike, a name, and an IPv6 literal with a
        # canonical tail are made, and posted to.
        for host in ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"]:
            reply = create_webhook(base, {"url": f"http://{host}:{receiver.port}/{host}", "events": ["task.created"]})
            assert reply.status_code == 201, f"{host}: {reply.text}"
        assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
        assert len(receiver.wait_for(3)) == 3


def test_a_leading_zero_octet_is_refused_without_private_targets_too(tmp_path):
    with run_headwayd(tmp_path) as base:
        reply = create_webhook(base, {"url": "http://012.9.9.9:18999/", "events": ["task.created"]})
        assert reply.status_code == 422 and reply.json()["code"] == "webhook_url_refused", reply.text
        assert "leading zeros" in reply.json()["errors"][0]["message"]


class Hanging:
    """A loopback server that accepts every connection and never answers."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.port = self.server.getsockname()[1]
        self.accepted = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self):
        self.server.close()
        for connection in self.accepted:
            connection.close()


@contextlib.contextmanager
def hanging():
    server = Hanging()
    try:
        yield server
    finally:
        server.close()


def daemon_threads(pid):
    with open(f"/proc/{pid}/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("Threads:")))


def test_ninety_nine_receivers_that_never_answer_delay_no_other_webhook(tmp_path):
    # 99 webhooks whose receiver accepts and never answers (the most there may be, with
    # the one below), made first; then one whose receiver answers at once. One event: the
    # answering receiver has it within a second or two, while the 99 hang, each with its
    # attempt in flight (it took 20 s behind 20 hanging receivers, 8 attempts at once of
    # 10 s each, and about two minutes behind 99), and the hanging attempts cost no thread each.
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with hanging() as slow, receiving() as fast:
        process = start(tmp_path, port, "--webhook-allow-private")
        try:
            idle_threads = daemon_threads(process.pid)
            for index in range(99):
                reply = create_webhook(base, {"url": f"http://127.0.0.1:{slow.port}/{index}", "events": ["task.created"]})
                assert reply.status_code == 201, reply.text
            assert create_webhook(base, {"url": fast.url, "events": ["task.created"]}).status_code == 201
            sent = time.monotonic()
            assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
            with fast.changed:
                arrived = fast.changed.wait_for(lambda: fast.requests, timeout=10)
            assert arrived, f"the fast receiver had nothing after 10 s ({len(slow.accepted)} hanging accepted)"
            waited = fast.requests[0]["at"] - sent
            assert waited < 3, f"the fast receiver waited {waited:.1f} s"
            for _ in range(200):
                if len(slow.accepted) >= 99:
                    break
                time.sleep(0.05)
            assert len(slow.accepted) == 99
            assert daemon_threads(process.pid) < idle_threads + 10, (idle_threads, daemon_threads(process.pid))
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0


def test_the_deprecated_concurrency_flag_holds_no_webhook_back(tmp_path):
    # `--webhook-concurrency 1` is still accepted (a configuration that has it starts), with
    # a warning, and ignored: two webhooks whose receiver takes 0.5 s a request have their
    # first deliveries at once, not one after the other.
    with receiving(delay=0.5) as receiver, \
            run_headwayd(tmp_path, *FAST_RETRIES, "--webhook-concurrency", "1") as base:
        for name in ["a", "b"]:
            reply = create_webhook(base, {"url": f"{receiver.url}/{name}", "events": ["task.created"]})
            assert reply.status_code == 201, reply.text
        assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
        first, second = receiver.wait_for(2)
        assert {first["path"], second["path"]} == {"/hook/a", "/hook/b"}
        assert second["at"] - first["at"] < 0.4
    log = (tmp_path / "headwayd.log").read_text()
    assert "event=config.deprecated" in log and "setting=webhook-concurrency" in log


def test_deleting_a_webhook_ends_its_attempt_in_flight(tmp_path):
    # A webhook whose receiver never answers is deleted while its attempt hangs. The
    # attempt ends with it: its connection is closed at once, not held for the rest of
    # --webhook-timeout. Held, an admin that made and deleted such webhooks in a loop
    # (100 at a time, the bound) had 1,500 sockets open in the daemon after 7 s, 330 more
    # a second, each for the whole timeout (up to 600 s): the open-file limit, then every
    # client's connection, ran out.
    with hanging() as slow, run_headwayd(tmp_path, *FAST_RETRIES, "--webhook-timeout", "60") as base:
        webhooks = []
        for index in range(5):
            reply = create_webhook(base, {"url": f"http://127.0.0.1:{slow.port}/{index}", "events": ["task.created"]})
            assert reply.status_code == 201, reply.text
            webhooks.append(reply.json()["id"])
        assert httpx.post(f"{base}/v1/tasks", json={"id": "t", "name": "T"}).status_code == 201
        for _ in range(PATIENCE * 20):
            if len(slow.accepted) >= 5:
                break
            time.sleep(0.05)
        assert len(slow.accepted) == 5
        for webhook in webhooks:
            assert httpx.delete(f"{base}/v1/webhooks/{webhook}").status_code == 204
        for connection in slow.accepted:
            connection.settimeout(5)
            try:
                closed = connection.recv(65536, socket.MSG_PEEK) == b"" or _drained(connection)
            except (TimeoutError, socket.timeout):
                closed = False
            assert closed, "a deleted webhook's attempt still holds its connection after 5 s"
        assert httpx.get(f"{base}/v1/webhooks").json()["webhooks"] == []


def _drained(connection):
    """Reads what the daemon sent (the POST) until it hangs up: True once it has."""
    while True:
        if connection.recv(65536) == b"":
            return True
