"""The event stream read by a well-kept third-party SSE client (httpx-sse), directly and
through nginx with the reverse-proxy config from deploy/, with the daemon on each of its
databases: a SQLite file and a PostgreSQL database."""
import json
import queue
import threading
import time

import httpx
import pytest
from httpx_sse import connect_sse

from conftest import run_headwayd


@pytest.fixture(params=["sqlite", "postgres"])
def headwayd(request, tmp_path):
    """The daemon on a free port with a fresh database of each kind (this module's tests
    run once per kind, the nginx fixture's daemon included); yields its base URL."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with run_headwayd(tmp_path, db=url) as base:
        yield base


def register(base, body):
    response = httpx.post(f"{base}/v1/tasks", json=body)
    assert response.status_code == 201, response.text
    return response.json()


class Reader:
    """Reads an event stream on a thread and hands each event over with its arrival time."""

    def __init__(self, base, headers=None, params=None):
        self.events = queue.Queue()
        self.client = httpx.Client(timeout=httpx.Timeout(10.0, read=30.0))
        self.thread = threading.Thread(target=self._run, args=(base, headers or {}, params or {}), daemon=True)
        self.thread.start()

    def _run(self, base, headers, params):
        try:
            with connect_sse(self.client, "GET", f"{base}/v1/events", headers=headers, params=params) as source:
                self.events.put(("response", source.response))
                for event in source.iter_sse():
                    # httpx-sse turns a keep-alive comment into an empty "message" once an id
                    # has been seen; the SSE standard dispatches nothing for it.
                    if event.data == "" and event.event == "message":
                        continue
                    self.events.put((time.monotonic(), event))
        except httpx.HTTPError:
            pass
        self.events.put(("end", None))

    def response(self):
        kind, response = self.events.get(timeout=10)
        assert kind == "response"
        return response

    def next(self, timeout=5.0):
        arrived, event = self.events.get(timeout=timeout)
        assert arrived != "end", "the stream ended"
        return arrived, event

    def close(self):
        self.client.close()


def exercise(base, server=None):
    register(base, {"id": "copy", "name": "Copy photos", "total": 100, "unit": "files"})
    reader = Reader(base)
    try:
        response = reader.response()
        assert response.status_code == 200
        if server:
            assert response.headers.get("server", "").startswith(server)
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        _, snapshot = reader.next()
        assert snapshot.event == "snapshot"
        assert [task["id"] for task in json.loads(snapshot.data)["tasks"]] == ["copy"]
        last_id = int(snapshot.id)

        # One small event at a time: a buffering proxy would hold it back until more
        # followed, and the read would time out waiting for it.
        for completed in (10, 20, 30):
            reply = httpx.post(f"{base}/v1/tasks/copy/progress", json={"completed": completed})
            assert reply.status_code == 200
            _, event = reader.next(timeout=5.0)
            assert event.event == "task.updated"
            assert json.loads(event.data)["completed"] == completed
            assert int(event.id) > last_id
            last_id = int(event.id)
        # The keep-alive comment (every second in this test) passes too; httpx-sse skips it,
        # so the next event must still arrive after a quiet period.
        time.sleep(1.5)
        httpx.post(f"{base}/v1/tasks/copy/heartbeat", json={"label": "Almost done"})
        _, event = reader.next()
        assert json.loads(event.data)["label"] == "Almost done"
        return int(event.id)
    finally:
        reader.close()


def test_third_party_client_reads_and_resumes(headwayd):
    last_id = exercise(headwayd)
    httpx.post(f"{headwayd}/v1/tasks/copy/finish", json={"outcome": "succeeded"})
    register(headwayd, {"id": "next", "name": "Next job"})
    reader = Reader(headwayd, headers={"Last-Event-ID": str(last_id)})
    try:
        assert reader.response().status_code == 200
        replayed = [reader.next()[1] for _ in range(2)]
        assert [event.event for event in replayed] == ["task.finished", "task.created"]
        assert [json.loads(event.data)["id"] for event in replayed] == ["copy", "next"]
        assert int(replayed[0].id) == last_id + 1
    finally:
        reader.close()


def test_events_pass_through_nginx_unbuffered(nginx):
    # With gzip or buffering in the way, the single small events below would not arrive
    # within a second (checked by hand: `gzip on` in the location makes this test fail).
    exercise(nginx, server="nginx")
