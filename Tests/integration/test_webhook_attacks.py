"""Webhooks attacked: what a token holder, a reporter or a hostile receiver could make the
daemon do that it should not. Each test here once failed against the daemon it describes.
A real daemon on loopback (`--webhook-allow-private`: the receivers are on loopback) posts
to a real `http.server` receiver (`test_webhooks.Receiver`)."""
import json

import httpx

from conftest import run_headwayd
from test_webhooks import FAST_RETRIES, create_webhook, receiving, wait_for_state


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
