"""The batch route (`POST /v1/progress`) and `headway progress-batch` as a hostile client,
a careless runner and an unlucky environment would use them: items outside a token's
prefix, JSON lines with unusual but valid (or invalid) bytes, a line too big for any
request, a server that refuses a request half-way through a file, and a client without a
token sending a megabyte."""
import json
import os
import socket
import subprocess
import time

import httpx

from conftest import HEADWAYD, ROOT, run_headwayd

HEADWAY = os.environ.get("HEADWAY_CLI", str(ROOT / ".build/debug/headway"))


def make_token(database, *arguments):
    """A token made with `headwayd token create` on `database` (before the daemon starts)."""
    result = subprocess.run([HEADWAYD, "token", "create", "--db", str(database), *arguments],
                            capture_output=True, text=True, check=True)
    return result.stdout.strip().splitlines()[-1]


def register(base, task_id, token=None, **fields):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    reply = httpx.post(f"{base}/v1/tasks", json={"id": task_id, "name": task_id, **fields}, headers=headers)
    assert reply.status_code == 201, reply.text


def completed(base, task_id, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{base}/v1/tasks/{task_id}", headers=headers).json()["completed"]


def progress_batch(base, path, *arguments, stdin=None):
    """`headway progress-batch` on `path` against `base`: (exit status, stdout, stderr)."""
    result = subprocess.run([HEADWAY, "progress-batch", str(path), "--server", base, *arguments],
                            input=stdin, capture_output=True, timeout=60)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def test_an_item_outside_the_token_prefix_is_not_found_whatever_else_it_says(tmp_path):
    """The single route answers 404 for another prefix's task before it reads the body; an
    item of a batch gets the same 404, even when its fields are wrong too (a 400 would
    answer differently for tasks the token may not even know of)."""
    admin = make_token(tmp_path / "headway.db", "--scope", "admin", "--name", "admin")
    runner = make_token(tmp_path / "headway.db", "--scope", "report", "--name", "ci", "--task-prefix", "ci-")
    with run_headwayd(tmp_path) as base:
        register(base, "ci-1", admin)
        register(base, "other", admin)
        single = httpx.post(f"{base}/v1/tasks/other/progress", json={"bogus": 1},
                            headers={"Authorization": f"Bearer {runner}"})
        assert single.status_code == 404, single.text
        reply = httpx.post(f"{base}/v1/progress", headers={"Authorization": f"Bearer {runner}"}, json={"updates": [
            {"task_id": "ci-1", "increment": 1},
            {"task_id": "other", "bogus": 1},
            {"task_id": "other", "increment": -1},
            {"task_id": "other", "increment": 1},
            {"task_id": "ci-1", "bogus": 1},
        ]})
        assert reply.status_code == 200, reply.text
        statuses = [(result["status"], result.get("problem", {}).get("code")) for result in reply.json()["results"]]
        assert statuses == [(200, None), (404, "not_found"), (404, "not_found"), (404, "not_found"),
                            (400, "invalid_request")]
        assert completed(base, "ci-1", admin) == 1
        assert completed(base, "other", admin) == 0


def test_a_json_line_holding_line_separators_in_a_string_is_one_update(headwayd, tmp_path):
    """JSON allows U+2028, U+2029 and U+0085 unescaped in strings (what `json.dumps(...,
    ensure_ascii=False)` writes); only LF ends a JSON line."""
    register(headwayd, "labelled")
    labels = ["before\u2028after", "one\u2029two", "next\u0085line"]
    file = tmp_path / "updates.jsonl"
    file.write_text("".join(json.dumps({"task_id": "labelled", "increment": 1, "label": label}, ensure_ascii=False)
                            + "\n" for label in labels), encoding="utf-8")
    status, _, errors = progress_batch(headwayd, file, "--json")
    assert (status, errors) == (0, "")
    task = httpx.get(f"{headwayd}/v1/tasks/labelled").json()
    assert (task["completed"], task["label"]) == (3, labels[-1])


def test_a_line_that_is_not_utf8_is_refused_before_anything_is_sent(headwayd, tmp_path):
    """An invalid byte in a label is not turned into U+FFFD and stored: the line is refused
    as the server would refuse it, and nothing of the file is sent."""
    register(headwayd, "plain")
    file = tmp_path / "updates.jsonl"
    file.write_bytes(b'{"task_id":"plain","increment":1}\n{"task_id":"plain","increment":1,"label":"\xff"}\n')
    status, _, errors = progress_batch(headwayd, file)
    assert status == 64, errors
    assert errors.startswith("headway: line 2 is not a JSON object"), errors
    assert completed(headwayd, "plain") == 0


def test_a_line_too_big_for_any_request_is_refused_before_anything_is_sent(headwayd, tmp_path):
    """A line that alone passes the request's 1 MiB would be sent alone and refused 413 after
    the lines before it were applied: it is a usage error before anything is sent."""
    register(headwayd, "big")
    file = tmp_path / "updates.jsonl"
    file.write_text('{"task_id":"big","increment":1}\n'
                    + json.dumps({"task_id": "big", "increment": 1, "note": "x" * (1 << 20)}) + "\n"
                    + '{"task_id":"big","increment":1}\n')
    status, _, errors = progress_batch(headwayd, file)
    assert status == 64, errors
    assert errors.startswith("headway: line 2 is too big for a request"), errors
    assert completed(headwayd, "big") == 0


def test_a_request_refused_half_way_says_which_lines_were_applied(tmp_path):
    """`--batch-size` above the server's `--max-batch-items`, and a first request cut short
    by its bytes: the first request is answered, the second refused whole (413). The command
    says where it stopped, so that the file is not sent again whole (every increment of
    the lines answered would count twice)."""
    with run_headwayd(tmp_path, "--max-batch-items", "2") as base:
        register(base, "half")
        file = tmp_path / "updates.jsonl"
        # Requests: lines 1-2 (line 3 would pass 1 MB), then lines 3-5 (3 items: 413).
        file.write_text('{"task_id":"half","increment":1}\n'
                        + json.dumps({"task_id": "half", "increment": 1, "note": "x" * 600_000}) + "\n"
                        + json.dumps({"task_id": "half", "increment": 1, "note": "x" * 500_000}) + "\n"
                        + '{"task_id":"half","increment":1}\n' * 2)
        status, _, errors = progress_batch(base, file, "--batch-size", "3")
        assert status == 1, errors
        assert errors.splitlines() == [
            "headway: line 2: Invalid request: note: is not a known field (invalid_request)",
            "headway: lines up to 2 were answered; nothing from line 3 on was applied",
            "headway: Too many items: A batch may hold at most 2 updates (got 3); send the rest in another "
            "request. (too_many_items)",
        ]
        assert completed(base, "half") == 1


def test_a_batch_body_without_a_token_is_refused_before_it_is_read(tmp_path):
    """The batch route takes bodies of 1 MiB (sixteen times the other routes'): a client
    without a token must not get the daemon to hold one per connection (1,000
    connections per address, 1 GiB) by sending it slowly. A client that asks first
    (`Expect: 100-continue`) is refused (401, or 413 past the other routes' limit)
    instead of being asked for the body; one whose token may report is asked for it."""
    token = make_token(tmp_path / "headway.db", "--scope", "admin", "--name", "admin")
    with run_headwayd(tmp_path) as base:
        port = int(base.rsplit(":", 1)[1])

        def first_answer(authorization):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
                connection.sendall(b"POST /v1/progress HTTP/1.1\r\nHost: 127.0.0.1\r\n" + authorization +
                                   b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
                                   b"Content-Length: 1048576\r\n\r\n")
                return connection.recv(4096).split(b"\r\n", 1)[0]

        assert first_answer(b"").startswith(b"HTTP/1.1 4")
        assert first_answer(b"Authorization: Bearer hw_" + b"x" * 43 + b"\r\n").startswith(b"HTTP/1.1 4")
        # A token that may report is asked for its megabyte, and a batch past the other
        # routes' 64 KiB is applied.
        assert first_answer(f"Authorization: Bearer {token}\r\n".encode()) == b"HTTP/1.1 100 Continue"
        register(base, "big", token=token)
        label = "x" * 200
        items = [{"task_id": "big", "increment": 1, "label": label} for _ in range(400)]
        reply = httpx.post(f"{base}/v1/progress", json={"updates": items},
                           headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert reply.status_code == 200 and len(reply.request.content) > 64 * 1024, reply.text[:500]
        assert all(result["status"] == 200 for result in reply.json()["results"])


def metric(base, name):
    for line in httpx.get(f"{base}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_batch_replies_left_unread_count_against_the_clients_share(tmp_path):
    # A batch's reply lists every item's task (about 0.8 MiB for 1,000 items): one client
    # address sending such batches on many connections and reading no reply held 256 MB
    # of replies unsent with 300 connections (four times --max-unsent-reply-bytes, RSS 42
    # -> 194 MiB), and every other client's read was refused 503 meanwhile. A batch is
    # admitted as a read is: past its share, the client's next batch is 503 `server_busy`
    # with nothing applied, and another client still reads.
    with run_headwayd(tmp_path, "--max-unsent-reply-bytes", str(8 * 1024 * 1024)) as base:
        for index in range(1000):
            register(base, f"t{index}", label="l" * 200)
        body = json.dumps({"updates": [{"task_id": f"t{index}", "increment": 1} for index in range(1000)]}).encode()
        request = (b"POST /v1/progress HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body)) + body
        port = int(base.rsplit(":", 1)[1])
        hoarders = []
        try:
            for _ in range(40):
                connection = socket.socket()
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                connection.bind(("127.0.0.5", 0))
                connection.connect(("127.0.0.1", port))
                connection.sendall(request)
                hoarders.append(connection)
            # Each batch is answered (applied, or refused): then the count stands still.
            unsent, last = None, -1
            for _ in range(100):
                unsent = metric(base, "headway_unsent_reply_bytes")
                if unsent == last:
                    break
                last = unsent
                time.sleep(0.2)
            assert unsent < 12 * 1024 * 1024, f"{unsent / 1048576:.0f} MiB of replies unsent"
            reply = httpx.get(f"{base}/v1/tasks?page_size=100")
            assert reply.status_code == 200, reply.text
        finally:
            for connection in hoarders:
                connection.close()
        assert httpx.get(f"{base}/v1/tasks/t0").json()["completed"] < 40, "every batch was applied"
