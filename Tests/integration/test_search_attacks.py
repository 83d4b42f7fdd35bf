"""`GET /v1/tasks?q=` as a hostile runner would use it: names made so that a text of one
character begins a great many distinct trigrams of the search index."""
import random
import time

import httpx


def test_a_one_character_search_stays_quick_when_names_hold_many_trigrams_it_begins(headwayd):
    """Names of "a" followed by two random CJK characters, 66 times: every task holds 66
    distinct trigrams beginning with "a". `q=a` read as the OR of every such trigram costs
    that many steps per matching task (minutes at 20,000 tasks); read from the index's
    instances it costs what their entries are, and must answer in well under the bound."""
    generator = random.Random(46)
    tasks = 1_500
    with httpx.Client(base_url=headwayd, timeout=60) as client:
        for number in range(tasks):
            name = "".join("a" + chr(0x4E00 + generator.randrange(20_000)) + chr(0x4E00 + generator.randrange(20_000))
                           for _ in range(66))
            reply = client.post("/v1/tasks", json={"id": f"t{number}", "name": name})
            assert reply.status_code == 201, reply.text
        # A task whose only "a" is in its id, and one without any.
        assert client.post("/v1/tasks", json={"id": "xa", "name": "plum"}).status_code == 201
        assert client.post("/v1/tasks", json={"id": "none", "name": "plum"}).status_code == 201

        started = time.monotonic()
        reply = client.get("/v1/tasks", params={"q": "A", "page_size": 500})
        elapsed = time.monotonic() - started
        assert reply.status_code == 200, reply.text
        page = reply.json()
        assert page["total_size"] == tasks + 1
        assert elapsed < 5, f"q=A took {elapsed:.1f} s"

        # The pages, newest first, carry the search and cover every match once.
        seen = [task["id"] for task in page["tasks"]]
        assert seen[0] == "xa"
        token = page["next_page_token"]
        while token:
            page = client.get("/v1/tasks", params={"q": "A", "page_size": 500, "page_token": token}).json()
            seen += [task["id"] for task in page["tasks"]]
            token = page["next_page_token"]
        assert len(seen) == len(set(seen)) == tasks + 1
        assert "none" not in seen

        # With another condition (a state), the same answer.
        reply = client.get("/v1/tasks", params={"q": "a", "state": "running", "page_size": 1})
        assert reply.json()["total_size"] == tasks + 1
