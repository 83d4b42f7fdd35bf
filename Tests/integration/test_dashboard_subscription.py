"""The dashboard asks only for what it shows, in a real headless Chromium against a live
headwayd: with 300 tasks its stream names the 20 rows of its page (and new top-level
tasks), a change on the page shows, one off the page opens no stream for it but moves the
tab counts, a new task appears at the top of page 1, and paging, opening a parent and a
detail view switch the stream with no change lost while tasks change all along.

Screenshots go to a temporary folder, or to $HEADWAY_SCREENSHOTS when set."""
import random
import re
import subprocess
import threading
import urllib.parse

import httpx
from selenium.webdriver.common.by import By

from conftest import HEADWAYD, run_headwayd
from test_dashboard import browser, console_errors, ids_on_page, js, open_dashboard, page, poll, progress, register, \
    row, screenshot_folder  # noqa: F401 (browser and page are fixtures)


def stream_query(driver):
    """The query of the page's newest event stream, as a dict of lists."""
    url = js(driver, "return window.headwayStats.streamURL")
    return urllib.parse.parse_qs(urllib.parse.urlparse(url).query)


def streamed_tasks(driver):
    return set(stream_query(driver).get("task", []))


def shown_completed(driver, task_id):
    """The `completed` a row shows ("1,234 of 1,000,000"), or None without a row."""
    found = row(driver, task_id)
    if found is None:
        return None
    match = re.match(r"([\d,]+) of", found.find_element(By.CSS_SELECTOR, ".count").text)
    return int(match.group(1).replace(",", "")) if match else None


def tab_count(driver, name):
    return driver.find_element(By.CSS_SELECTOR, f'[data-filter="{name}"] .count').text


def stats(driver, name):
    return js(driver, f"return window.headwayStats.{name}")


WATCH_ROWS = """
window.rowsWentBack = [];
const highest = new Map();
const look = () => {
  for (const li of document.querySelectorAll('#tasks > li')) {
    const match = /^([\\d,]+) of/.exec(li.querySelector('.count')?.textContent ?? '');
    if (!match) continue;
    const value = Number(match[1].replaceAll(',', ''));
    const id = li.dataset.taskId;
    if (value < (highest.get(id) ?? 0)) window.rowsWentBack.push(`${id}: ${value} after ${highest.get(id)}`);
    highest.set(id, Math.max(value, highest.get(id) ?? 0));
  }
};
new MutationObserver(look).observe(document.getElementById('tasks'), {subtree: true, childList: true, characterData: true});
"""


def register_many(base, count, prefix="t", total=1_000_000):
    with httpx.Client(base_url=base) as client:
        for number in range(count):
            reply = client.post("/v1/tasks", json={"id": f"{prefix}{number:03d}", "name": f"Task {number:03d}",
                                                   "total": total, "stall_timeout_seconds": 3600})
            assert reply.status_code == 201, reply.text


def first_page(count, prefix="t"):
    return [f"{prefix}{number:03d}" for number in range(count - 1, count - 21, -1)]


def test_the_stream_names_the_page_and_hears_of_the_rest(page, headwayd, tmp_path):
    folder = screenshot_folder(tmp_path)
    register_many(headwayd, 300)
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                         {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    open_dashboard(page, headwayd)
    poll(lambda: ids_on_page(page) == first_page(300), 5, "page 1: t299 … t280")
    poll(lambda: streamed_tasks(page) == set(first_page(300)), 5, "the stream names the 20 rows")
    query = stream_query(page)
    assert query["new_roots"] == ["true"] and "parent_id" not in query
    assert stats(page, "wholeStream") is False
    poll(lambda: tab_count(page, "running") == "300", 5, "the Running count")

    # A change on the page shows.
    progress(headwayd, "t290", completed=1234)
    poll(lambda: shown_completed(page, "t290") == 1234, 5, "t290 at 1,234")

    # Changes off the page open no stream and bring no event; the counts still move.
    opened = stats(page, "streamsOpened")
    events = stats(page, "events")
    for number in range(10):
        progress(headwayd, f"t{number:03d}", completed=5)
    assert httpx.post(f"{headwayd}/v1/tasks/t005/finish", json={"outcome": "failed"}).status_code == 200
    poll(lambda: tab_count(page, "failed") == "1" and tab_count(page, "running") == "299", 8, "the counts moved")
    assert stats(page, "streamsOpened") == opened, "no stream for a task off the page"
    assert stats(page, "events") == events, "no event of a task off the page"
    assert "t005" not in streamed_tasks(page)

    # A new task appears at the top of page 1 at once (its creation: new_roots).
    register(headwayd, id="newest", name="Newest task", total=10)
    poll(lambda: ids_on_page(page)[:1] == ["newest"], 2, "the new task on top of page 1")
    poll(lambda: "newest" in streamed_tasks(page), 5, "followed from then on")
    progress(headwayd, "newest", completed=7)
    poll(lambda: shown_completed(page, "newest") == 7, 5, "the new task moves")
    page.save_screenshot(str(folder / "subscription-page-1.png"))

    # A parent opened: its children (a new one too) come by parent_id; a detail view names its task.
    register(headwayd, id="kid1", name="Child 1", parent_id="t285", total=10)
    poll(lambda: row(page, "t285").find_elements(By.CSS_SELECTOR, ".expander"), 5, "t285 has an expander")
    row(page, "t285").find_element(By.CSS_SELECTOR, ".expander").click()
    poll(lambda: stream_query(page).get("parent_id") == ["t285"], 5, "the stream names the open parent")
    register(headwayd, id="kid2", name="Child 2", parent_id="t285", total=10)
    progress(headwayd, "kid2", completed=3)
    children = lambda: js(page, "return [...document.querySelectorAll('li[data-task-id=\"t285\"] .children > li')]"
                                ".map((li) => li.dataset.taskId)")
    poll(lambda: set(children()) == {"kid1", "kid2"}, 5, "both children under the open parent")
    js(page, "arguments[0].scrollIntoView({block: 'center'})", row(page, "t285"))
    page.save_screenshot(str(folder / "subscription-parent-open.png"))
    js(page, "location.hash = '#task=t150'")
    poll(lambda: page.find_element(By.ID, "detail-heading").text == "Task 150", 5, "the detail view of t150")
    poll(lambda: "t150" in streamed_tasks(page) and "t150" in stream_query(page).get("parent_id", []), 5,
         "the stream names the detail task and its children")
    progress(headwayd, "t150", completed=4321)
    poll(lambda: "4,321" in page.find_element(By.ID, "detail-row").text, 5, "the detail task moves")
    page.save_screenshot(str(folder / "subscription-detail.png"))
    page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert console_errors(page) == []


def test_paging_switches_the_stream_with_no_change_lost(page, headwayd, tmp_path):
    folder = screenshot_folder(tmp_path)
    register_many(headwayd, 300)
    open_dashboard(page, headwayd)
    poll(lambda: ids_on_page(page) == first_page(300), 5, "page 1")
    poll(lambda: streamed_tasks(page) == set(first_page(300)), 5, "the stream names page 1")
    opened = stats(page, "streamsOpened")
    # Changes all along to the tasks of pages 1 and 2, while the page switches.
    targets = [f"t{number:03d}" for number in range(299, 259, -1)]
    stop = threading.Event()
    sent = {"count": 0}

    def drive():
        values = {task: 0 for task in targets}
        chooser = random.Random(7)
        with httpx.Client(base_url=headwayd) as client:
            while not stop.is_set() and sent["count"] < 100_000:
                updates = []
                for task in chooser.sample(targets, 10):
                    values[task] += 1
                    updates.append({"task_id": task, "completed": values[task]})
                assert client.post("/v1/progress", json={"updates": updates}).status_code == 200
                sent["count"] += len(updates)

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        poll(lambda: sent["count"] > 200, 10, "changes flowing")
        page.find_element(By.ID, "next-page").click()
        page_two = [f"t{number:03d}" for number in range(279, 259, -1)]
        poll(lambda: ids_on_page(page) == page_two, 5, "page 2")
        poll(lambda: streamed_tasks(page) == set(page_two), 5, "the stream names page 2")
        # From now on a row that ever shows less than it showed before was given an older change.
        js(page, WATCH_ROWS)
        # Back and forth while the changes go on.
        for _ in range(2):
            page.find_element(By.ID, "prev-page").click()
            poll(lambda: ids_on_page(page) == first_page(300) and streamed_tasks(page) == set(first_page(300)), 5,
                 "page 1 again")
            page.find_element(By.ID, "next-page").click()
            poll(lambda: ids_on_page(page) == page_two and streamed_tasks(page) == set(page_two), 5, "page 2 again")
        mark = sent["count"]
        poll(lambda: sent["count"] > mark + 200, 10, "changes after the last switch")
    finally:
        stop.set()
        driver.join(timeout=30)
    assert stats(page, "streamsOpened") >= opened + 5
    stored = {task["id"]: task["completed"] for task in
              httpx.get(f"{headwayd}/v1/tasks?page_size=100&root=true").json()["tasks"]}
    # Nothing changes any more: a change lost across a switch would leave its row behind for good.
    poll(lambda: all(shown_completed(page, task) == stored[task] for task in page_two), 5,
         "every row of page 2 at its stored value")
    assert js(page, "return window.rowsWentBack") == [], "no row ever went back"
    page.save_screenshot(str(folder / "subscription-page-2.png"))
    assert console_errors(page) == []


def test_a_token_with_a_task_prefix_follows_its_page(page, tmp_path):
    tmp_path.mkdir(exist_ok=True)
    made = subprocess.run([HEADWAYD, "token", "create", "--scope", "read", "--scope", "report", "--task-prefix", "team-",
                           "--name", "team", "--db", str(tmp_path / "headway.db")], capture_output=True, text=True, check=True)
    token = made.stdout.strip()
    auth = {"Authorization": f"Bearer {token}"}
    with run_headwayd(tmp_path) as base:
        for number in range(25):
            reply = httpx.post(f"{base}/v1/tasks", headers=auth,
                               json={"id": f"team-{number:02d}", "name": f"Team {number:02d}", "total": 100})
            assert reply.status_code == 201, reply.text
        page.get(f"{base}/?min_duration=0&lang=en")
        js(page, "sessionStorage.setItem('headway.token', arguments[0])", token)
        open_dashboard(page, base)
        shown = [f"team-{number:02d}" for number in range(24, 4, -1)]
        poll(lambda: ids_on_page(page) == shown, 5, "the team's page 1")
        poll(lambda: streamed_tasks(page) == set(shown), 5, "the stream names the team's rows")
        assert httpx.post(f"{base}/v1/tasks/team-20/progress", headers=auth, json={"completed": 42}).status_code == 200
        poll(lambda: re.match(r"42 of", row(page, "team-20").find_element(By.CSS_SELECTOR, ".count").text), 5,
             "a change on the page shows")
        reply = httpx.post(f"{base}/v1/tasks", headers=auth, json={"id": "team-new", "name": "Team new", "total": 5})
        assert reply.status_code == 201
        poll(lambda: ids_on_page(page)[:1] == ["team-new"], 3, "a new task of the team on top")
        next_page = page.find_element(By.ID, "next-page")
        poll(lambda: page.find_element(By.ID, "page-text").text == "Page 1 of 2" and next_page.is_enabled(), 5,
             "Page 1 of 2")
        next_page.click()
        poll(lambda: page.find_element(By.ID, "page-text").text == "Page 2 of 2" and "team-03" in ids_on_page(page), 5,
             "page 2")
        poll(lambda: streamed_tasks(page) == set(ids_on_page(page)), 5, "the stream names page 2's rows")
        assert httpx.post(f"{base}/v1/tasks/team-03/progress", headers=auth, json={"completed": 9}).status_code == 200
        poll(lambda: re.match(r"9 of", row(page, "team-03").find_element(By.CSS_SELECTOR, ".count").text), 5,
             "a change on page 2 shows")
        assert console_errors(page) == []
        js(page, "sessionStorage.clear()")


def test_a_flood_of_new_tasks_is_told_by_the_counts(page, headwayd):
    """Past 50 creations in 10 s the page stops asking for them (every creation goes to
    every page that asks); new tasks still reach page 1, by the counts."""
    register(headwayd, id="first", name="First", total=10)
    open_dashboard(page, headwayd)
    poll(lambda: stream_query(page).get("new_roots") == ["true"] and "first" in streamed_tasks(page), 5,
         "new_roots asked for")
    register_many(headwayd, 60, prefix="flood")
    poll(lambda: "new_roots" not in stream_query(page), 10, "no longer asked for")
    register(headwayd, id="later", name="Later", total=10)
    poll(lambda: ids_on_page(page)[:1] == ["later"], 10, "a new task on top of page 1 all the same")
    assert "new_roots" not in stream_query(page)
    assert console_errors(page) == []
