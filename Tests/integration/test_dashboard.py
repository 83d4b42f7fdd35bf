"""The dashboard in a real headless Chromium against a live headwayd: it loads without
console errors, shows tasks live (bars, aria values, the activity indicator that stops
when a task stalls), cancels, never shows a task shorter than min_duration, pages,
survives a restart of the daemon, speaks Korean, and asks for a token when one is needed.

Screenshots go to a temporary folder, or to $HEADWAY_SCREENSHOTS when set
(`HEADWAY_SCREENSHOTS=docs/screenshots` refreshes those of docs/dashboard.md)."""
import contextlib
import os
import pathlib
import signal
import subprocess
import time

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import HEADWAYD, chromium_driver, chromium_options, free_port, run_headwayd, wait_for_port


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium of its own, keeping the page's console messages."""
    options = chromium_options()
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with chromium_driver(options) as driver:
        yield driver


@pytest.fixture
def page(browser):
    """The browser, reset to a light desktop window in English for each test."""
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    browser.get("about:blank")
    browser.get_log("browser")
    yield browser


def poll(condition, bound=5.0, what="condition"):
    """Calls `condition` until it returns something true (returned), for at most `bound` seconds."""
    deadline = time.monotonic() + bound
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound} s: {what}")
        time.sleep(0.02)


def open_dashboard(driver, base, query="min_duration=0&lang=en"):
    driver.get(f"{base}/?{query}")
    poll(lambda: driver.find_element(By.ID, "connection").get_attribute("data-state") == "live", 10, "Live")


def row(driver, task_id):
    rows = driver.find_elements(By.CSS_SELECTOR, f'#tasks > li[data-task-id="{task_id}"]')
    return rows[0] if rows else None


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def register(base, **task):
    reply = httpx.post(f"{base}/v1/tasks", json=task)
    assert reply.status_code == 201, reply.text
    return reply.json()


def progress(base, task_id, **update):
    reply = httpx.post(f"{base}/v1/tasks/{task_id}/progress", json=update)
    assert reply.status_code == 200, reply.text
    return reply.json()


CONTRAST = """
    const rgb = (text) => text.match(/[\\d.]+/g).slice(0, 4).map(Number);
    const lum = ([r, g, b]) => {
      const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const node = arguments[0];
    let fg = rgb(getComputedStyle(node).color);
    let opacity = 1;
    for (let n = node; n; n = n.parentElement) opacity *= Number(getComputedStyle(n).opacity);
    let bg = null;
    for (let n = node; n && !bg; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor);
      if (c.length < 4 || c[3] > 0) bg = c;
    }
    bg ??= [255, 255, 255];
    fg = fg.slice(0, 3).map((c, i) => c * opacity + bg[i] * (1 - opacity));
    const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    return (a + 0.05) / (b + 0.05);"""


def contrast(driver, element):
    """The contrast ratio of `element`'s text on the first opaque background behind it,
    its ancestors' opacity applied."""
    return js(driver, CONTRAST, element)


def console_errors(driver):
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot_folder(tmp_path):
    folder = pathlib.Path(os.environ.get("HEADWAY_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_files_answer_head_and_revalidate(headwayd):
    full = httpx.get(f"{headwayd}/assets/app.js")
    assert full.status_code == 200 and full.headers["content-type"] == "text/javascript; charset=utf-8"
    head = httpx.head(f"{headwayd}/assets/app.js")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["etag"] == full.headers["etag"]
    assert head.headers["content-length"] == str(len(full.content))
    again = httpx.get(f"{headwayd}/assets/app.js", headers={"If-None-Match": full.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    missing = httpx.get(f"{headwayd}/assets/missing.js")
    assert missing.status_code == 404 and missing.json()["code"] == "asset_not_found"


def test_the_page_loads_clean_and_a_task_appears_and_moves(page, headwayd):
    open_dashboard(page, headwayd)
    assert page.title == "Headway"
    register(headwayd, id="copy", name="Copy photos", total=1000, unit="files")
    found = poll(lambda: row(page, "copy"), 1.0, "the new task's row within 1 s")
    bar = found.find_element(By.CSS_SELECTOR, ".bar")
    assert bar.get_attribute("role") == "progressbar"
    assert (bar.get_attribute("aria-valuemin"), bar.get_attribute("aria-valuemax")) == ("0", "100")
    assert bar.get_attribute("aria-valuenow") == "0"
    assert "Copy photos" in found.text and "0 of 1,000 files" in found.text

    progress(headwayd, "copy", completed=640)
    poll(lambda: bar.get_attribute("aria-valuenow") == "64", 5, "aria-valuenow 64")
    assert bar.get_attribute("aria-valuetext").startswith("64 percent")
    assert "64%" in found.text and "640 of 1,000 files" in found.text
    fill = found.find_element(By.CSS_SELECTOR, ".bar .fill")
    poll(lambda: js(page, "return getComputedStyle(arguments[0]).transform", fill) == "matrix(0.64, 0, 0, 1, 0, 0)",
         5, "the bar filled to 64%")
    assert console_errors(page) == []


def test_an_indeterminate_task_animates_until_it_stalls(page, headwayd):
    open_dashboard(page, headwayd)
    register(headwayd, id="scan", name="Scan disks", label="Reading /dev/sda", stall_timeout_seconds=1)
    found = poll(lambda: row(page, "scan"), 5, "the task's row")
    assert "Reading /dev/sda" in found.text and "Scan disks" in found.text
    sweep = found.find_element(By.CSS_SELECTOR, ".activity .sweep")
    assert found.find_element(By.CSS_SELECTOR, ".activity").get_attribute("role") == "progressbar"
    assert js(page, "return arguments[0].getAnimations().length", sweep) > 0
    assert js(page, "return getComputedStyle(arguments[0]).animationName", sweep) == "sweep"

    poll(lambda: "stalled" in found.get_attribute("class"), 10, "the row marked stalled")
    assert js(page, "return arguments[0].getAnimations().length", sweep) == 0
    assert js(page, "return getComputedStyle(arguments[0]).animationName", sweep) == "none"
    stall = found.find_element(By.CSS_SELECTOR, ".stall")
    assert stall.text.startswith("No signal for")
    first = stall.text
    poll(lambda: stall.text != first, 5, "the stall's age counting")

    assert httpx.post(f"{headwayd}/v1/tasks/scan/heartbeat", json={}).status_code == 200
    poll(lambda: "stalled" not in found.get_attribute("class"), 5, "moving again after task.recovered")
    assert js(page, "return arguments[0].getAnimations().length", sweep) > 0
    assert console_errors(page) == []


def test_reduced_motion_pulses_instead_of_sweeping(page, headwayd):
    page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-reduced-motion", "value": "reduce"}]})
    try:
        open_dashboard(page, headwayd)
        register(headwayd, id="calm", name="Calm", stall_timeout_seconds=1)
        found = poll(lambda: row(page, "calm"), 5, "the row")
        sweep = found.find_element(By.CSS_SELECTOR, ".activity .sweep")
        assert js(page, "return getComputedStyle(arguments[0]).animationName", sweep) == "pulse"
        assert js(page, "return arguments[0].getAnimations().length", sweep) > 0
        poll(lambda: "stalled" in found.get_attribute("class"), 10, "stalled")
        assert js(page, "return arguments[0].getAnimations().length", sweep) == 0
    finally:
        page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def test_keyboard_alone_opens_a_task_and_comes_back(page, headwayd):
    from selenium.webdriver.common.keys import Keys
    register(headwayd, id="kb", name="Keyboard task", total=10)
    open_dashboard(page, headwayd)
    poll(lambda: row(page, "kb"), 5, "the row")
    body = page.find_element(By.TAG_NAME, "body")
    for _ in range(30):
        body = page.switch_to.active_element
        if body.get_attribute("class") == "name":
            break
        body.send_keys(Keys.TAB)
    assert page.switch_to.active_element.text == "Keyboard task"
    page.switch_to.active_element.send_keys(Keys.ENTER)
    poll(lambda: page.find_element(By.ID, "detail-view").is_displayed(), 5, "the detail view")
    assert page.switch_to.active_element.get_attribute("id") == "back"
    page.switch_to.active_element.send_keys(Keys.ESCAPE)
    poll(lambda: page.find_element(By.ID, "list-view").is_displayed(), 5, "back to the list")
    assert console_errors(page) == []


def test_cancel_from_the_page_reaches_the_runner(page, headwayd):
    open_dashboard(page, headwayd)
    register(headwayd, id="job", name="Render video", total=100)
    progress(headwayd, "job", completed=10)
    found = poll(lambda: row(page, "job"), 5, "the task's row")
    cancel = found.find_element(By.CSS_SELECTOR, ".cancel")
    assert cancel.text == "Cancel" and cancel.is_displayed()
    cancel.click()
    question = found.find_element(By.CSS_SELECTOR, ".confirm")
    poll(lambda: question.is_displayed(), 2, "the confirmation")
    assert "Cancel “Render video”?" in question.text
    # Escape dismisses the confirmation, the focus back on Cancel, the page still the list.
    poll(lambda: page.switch_to.active_element.get_attribute("class") == "no", 2, "the focus on Keep running")
    page.switch_to.active_element.send_keys(Keys.ESCAPE)
    poll(lambda: not question.is_displayed() and cancel.is_displayed(), 2, "the confirmation dismissed")
    poll(lambda: page.switch_to.active_element.get_attribute("class") == "cancel", 2, "the focus on Cancel")
    cancel.click()
    poll(lambda: question.is_displayed(), 2, "the confirmation again")
    # Nothing is sent before the confirmation.
    assert progress(headwayd, "job", completed=11)["cancel_requested"] is False
    found.find_element(By.CSS_SELECTOR, ".confirm .yes").click()
    poll(lambda: cancel.text == "Canceling…", 5, "Canceling…")
    # The focus, on the Yes button that is gone, moves to the task's link.
    poll(lambda: page.switch_to.active_element.get_attribute("class") == "name"
         and page.switch_to.active_element.text == "Render video", 2, "the focus on the task")
    poll(lambda: progress(headwayd, "job", completed=12)["cancel_requested"] is True, 5, "the runner told")
    assert not cancel.is_enabled()
    reply = httpx.post(f"{headwayd}/v1/tasks/job/finish", json={"outcome": "canceled"})
    assert reply.status_code == 200, reply.text
    poll(lambda: "finished" in found.get_attribute("class"), 5, "finished, dimmed")
    assert not cancel.is_displayed()
    assert "Canceled" in found.text
    assert console_errors(page) == []


@contextlib.contextmanager
def movable_clock(page):
    """The page's clock (`performance.now`) made movable from the test (`window.clockOffset`,
    in milliseconds) for the pages loaded meanwhile: time moved forward instead of waited."""
    script = page.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        window.clockOffset = 0;
        const realNow = performance.now.bind(performance);
        performance.now = () => realNow() + window.clockOffset;"""})
    try:
        yield
    finally:
        page.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]})


def test_a_finished_task_stays_a_minute_dimmed_then_leaves(page, headwayd):
    with movable_clock(page):
        register(headwayd, id="done", name="Done soon", total=2)
        register(headwayd, id="other", name="Still going", total=2)
        open_dashboard(page, headwayd)
        found = poll(lambda: row(page, "done"), 5, "the row")
        assert page.find_element(By.ID, "page-text").text == "Page 1 of 1"
        assert httpx.post(f"{headwayd}/v1/tasks/done/finish", json={"outcome": "succeeded"}).status_code == 200
        poll(lambda: "finished" in found.get_attribute("class"), 5, "dimmed")
        # Dimmed, yet its text readable: 4.5:1 against the row's background at least.
        assert contrast(page, found.find_element(By.CSS_SELECTOR, ".name")) >= 4.5
        assert contrast(page, found.find_element(By.CSS_SELECTOR, ".tid")) >= 4.5
        # After a reload too it stays (finished within the last minute).
        page.refresh()
        poll(lambda: page.find_element(By.ID, "connection").get_attribute("data-state") == "live", 10, "Live")
        found = poll(lambda: row(page, "done"), 5, "the finished row after a reload")
        poll(lambda: "finished" in found.get_attribute("class"), 5, "dimmed after a reload")
        js(page, "window.clockOffset = 50000")
        time.sleep(1.5)  # more than one tick of the page's 1 s timer: still there at 50 s
        assert row(page, "done") is not None
        js(page, "window.clockOffset = 61000")
        poll(lambda: row(page, "done") is None, 5, "gone after a minute")
        assert row(page, "other") is not None


def test_a_task_shorter_than_min_duration_never_appears(page, headwayd):
    open_dashboard(page, headwayd, "lang=en")
    assert page.find_element(By.ID, "min-duration").get_attribute("value") == "2"
    js(page, """
        window.seen = [];
        new MutationObserver((records) => {
          for (const record of records) for (const node of record.addedNodes) {
            if (node.nodeType === 1) {
              if (node.dataset.taskId) window.seen.push(node.dataset.taskId);
              for (const inner of node.querySelectorAll('[data-task-id]')) window.seen.push(inner.dataset.taskId);
            }
          }
        }).observe(document.body, {childList: true, subtree: true});""")
    register(headwayd, id="short", name="Quick", total=1)
    time.sleep(1)  # the task's own life, not an assertion
    assert httpx.post(f"{headwayd}/v1/tasks/short/finish", json={"outcome": "succeeded"}).status_code == 200
    register(headwayd, id="long", name="Slow")
    poll(lambda: row(page, "long"), 10, "the longer task, once 2 s old")
    assert "long" in js(page, "return window.seen")
    assert "short" not in js(page, "return window.seen")
    assert console_errors(page) == []


def test_detail_view_shows_fields_children_and_history(page, headwayd):
    register(headwayd, id="deploy", name="Deploy")
    register(headwayd, id="deploy.build", name="Build", parent_id="deploy", total=4)
    register(headwayd, id="deploy.push", name="Push", parent_id="deploy", total=4)
    progress(headwayd, "deploy.build", completed=2)
    open_dashboard(page, headwayd)
    parent = poll(lambda: row(page, "deploy"), 5, "the parent")
    bar = parent.find_element(By.CSS_SELECTOR, ".bar")
    assert bar.get_attribute("aria-valuenow") == "25"  # the roll-up of 50% and 0%
    expander = parent.find_element(By.CSS_SELECTOR, ".expander")
    assert expander.get_attribute("aria-expanded") == "false"
    expander.click()
    poll(lambda: len(parent.find_elements(By.CSS_SELECTOR, ".children > li")) == 2, 5, "two children")
    assert expander.get_attribute("aria-expanded") == "true"
    parent.find_element(By.CSS_SELECTOR, ".name").click()
    poll(lambda: page.find_element(By.ID, "detail-view").is_displayed(), 5, "the detail view")
    assert page.find_element(By.ID, "detail-heading").text == "Deploy"
    poll(lambda: len(page.find_elements(By.CSS_SELECTOR, "#detail-children > li")) == 2, 5, "children in the detail")
    assert "deploy" in page.find_element(By.ID, "fields").text
    poll(lambda: js(page, "return document.querySelectorAll('#chart polyline').length") == 1, 5, "the history line")
    progress(headwayd, "deploy.push", completed=4)
    poll(lambda: page.find_element(By.CSS_SELECTOR, "#detail-row .bar").get_attribute("aria-valuenow") == "75", 5,
         "the detail live")
    # A page-2 task's updates do not make the list longer.
    page.find_element(By.ID, "back").click()
    poll(lambda: page.find_element(By.ID, "list-view").is_displayed(), 5, "the list")
    assert page.find_element(By.ID, "page-text").text == "Page 1 of 1"
    assert console_errors(page) == []


def test_pages_filters_and_search(page, headwayd):
    for number in range(45):
        register(headwayd, id=f"t{number:02d}", name=f"Task {number:02d}", total=10)
    for task_id in ["t03", "t07"]:
        assert httpx.post(f"{headwayd}/v1/tasks/{task_id}/finish", json={"outcome": "failed"}).status_code == 200
    open_dashboard(page, headwayd)
    page_text = page.find_element(By.ID, "page-text")
    ids = lambda: js(page, "return [...document.querySelectorAll('#tasks > li')].map((li) => li.dataset.taskId)")
    poll(lambda: page_text.text == "Page 1 of 3", 5, "Page 1 of 3 (43 running)")
    first_page = [f"t{n:02d}" for n in range(44, 23, -1) if n not in (3, 7)][:20]
    assert ids() == first_page
    # Updates of tasks on other pages change neither this page nor its count: its stream
    # does not even carry them (only the one to a row of the page, sent last, comes).
    events = js(page, "return headwayStats.events")
    others = [f"t{number:02d}" for number in range(22) if number not in (3, 7)]
    for task_id in others:
        progress(headwayd, task_id, completed=5)
    progress(headwayd, "t44", completed=6)
    poll(lambda: "6 of 10" in row(page, "t44").text, 5, "the update of a row seen")
    assert js(page, "return headwayStats.events") == events + 1
    assert page_text.text == "Page 1 of 3" and ids() == first_page
    page.find_element(By.ID, "next-page").click()
    poll(lambda: page_text.text == "Page 2 of 3", 5, "Page 2 of 3")
    poll(lambda: ids() and ids()[0] == "t24", 5, "the second page's rows")
    page.find_element(By.ID, "next-page").click()
    poll(lambda: page_text.text == "Page 3 of 3", 5, "Page 3 of 3")
    poll(lambda: ids() == ["t02", "t01", "t00"], 5, "the last page's rows")
    assert not page.find_element(By.ID, "next-page").is_enabled()


    page.find_element(By.CSS_SELECTOR, '[data-filter="failed"]').click()
    poll(lambda: ids() == ["t07", "t03"], 5, "the failed tasks")
    assert httpx.post(f"{headwayd}/v1/tasks/t01/finish", json={"outcome": "failed"}).status_code == 200
    poll(lambda: ids() == ["t07", "t03", "t01"], 5, "a task that just failed joins")
    assert page_text.text == "Page 1 of 1"
    page.find_element(By.CSS_SELECTOR, '[data-filter="all"]').click()
    poll(lambda: len(ids()) == 20 and page_text.text == "Page 1 of 3", 5, "all 45")
    # The server searches every page (`q`: a name or id containing the text, any case).
    search = page.find_element(By.ID, "search")
    assert "every page" in page.find_element(By.ID, "search-hint").text
    search.send_keys("t1")
    poll(lambda: ids() == [f"t{n}" for n in range(19, 9, -1)] and page_text.text == "Page 1 of 1", 5, "ids t1…")
    search.clear()
    search.send_keys("T")
    poll(lambda: len(ids()) == 20 and page_text.text == "Page 1 of 3", 5, "ids t…, 3 pages")
    page.find_element(By.ID, "next-page").click()
    poll(lambda: page_text.text == "Page 2 of 3" and ids()[0] == "t24", 5, "the second page of the search")
    search.clear()
    search.send_keys("x")
    poll(lambda: ids() == [] and page_text.text == "Page 1 of 1", 5, "no name or id holds x")
    # By name, across every page: "Task 0…" are on page 3 of All.
    search.clear()
    search.send_keys("task 0")
    poll(lambda: ids() == [f"t{n:02d}" for n in range(9, -1, -1)] and page_text.text == "Page 1 of 1", 5,
         "a name on page 3 found from page 1")
    assert console_errors(page) == []


@contextlib.contextmanager
def daemon_on(directory, port):
    """headwayd on `port` with the database in `directory` (kept between runs)."""
    log = open(directory / "headwayd.log", "a")
    process = subprocess.Popen([HEADWAYD, "--listen", f"127.0.0.1:{port}", "--db", str(directory / "headway.db"),
                                "--durability", "normal", "--sse-heartbeat", "1"], stderr=log)
    try:
        wait_for_port(port, process, "headwayd")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        log.close()


def test_a_restart_under_the_open_page_misses_nothing(page, tmp_path):
    port = free_port()
    with daemon_on(tmp_path, port) as base:
        register(base, id="a", name="Alpha", total=100)
        register(base, id="b", name="Beta", total=100)
        open_dashboard(page, base)
        poll(lambda: row(page, "a") and row(page, "b"), 5, "both rows")
    connection = page.find_element(By.ID, "connection")
    poll(lambda: connection.text == "Reconnecting…", 10, "Reconnecting…")
    with daemon_on(tmp_path, port) as base:
        # Made before the page is back (EventSource waits for its retry delay).
        progress(base, "a", completed=42)
        assert httpx.post(f"{base}/v1/tasks/b/finish", json={"outcome": "failed"}).status_code == 200
        poll(lambda: connection.text == "Live", 15, "Live again")
        bar = row(page, "a").find_element(By.CSS_SELECTOR, ".bar")
        poll(lambda: bar.get_attribute("aria-valuenow") == "42", 5, "the update made while away")
        poll(lambda: "Failed" in row(page, "b").text, 5, "the finish made while away")
    # The daemon gone for good: offline, with the time it was lost.
    poll(lambda: connection.text.startswith("Offline since"), 20, "Offline since HH:MM")


def test_korean(page, headwayd, tmp_path):
    register(headwayd, id="k", name="백업", total=10)
    open_dashboard(page, headwayd)
    poll(lambda: row(page, "k"), 5, "the row")
    select = page.find_element(By.ID, "language")
    select.find_element(By.CSS_SELECTOR, 'option[value="ko"]').click()
    poll(lambda: js(page, "return document.documentElement.lang") == "ko", 2, "lang=ko")
    assert page.find_element(By.CSS_SELECTOR, '[data-filter="running"] [data-i18n]').text == "진행 중"
    poll(lambda: page.find_element(By.ID, "connection").text == "실시간", 2, "실시간")
    assert page.find_element(By.ID, "page-text").text == "1페이지 중 1페이지"
    assert "10 중 0" in row(page, "k").text and "취소" in row(page, "k").text
    # korean.png is taken by test_screenshots_of_why_attention_output_and_offline, with more to read.
    page.get(f"{headwayd}/?lang=ko")
    poll(lambda: page.find_element(By.ID, "prev-page").text == "이전", 5, "Korean from ?lang=ko")
    js(page, "localStorage.clear()")
    assert console_errors(page) == []


def make_token(directory, *scopes):
    arguments = [item for scope in scopes for item in ("--scope", scope)]
    made = subprocess.run([HEADWAYD, "token", "create", *arguments, "--name", "wall", "--db", str(directory / "headway.db")],
                          capture_output=True, text=True, check=True)
    return made.stdout.strip()


def test_a_token_is_asked_for_and_a_read_only_one_cannot_cancel(page, tmp_path):
    tmp_path.mkdir(exist_ok=True)
    admin = make_token(tmp_path, "admin")
    reader = make_token(tmp_path, "read")
    with run_headwayd(tmp_path) as base:
        auth = {"Authorization": f"Bearer {admin}"}
        assert httpx.post(f"{base}/v1/tasks", json={"id": "x", "name": "Export", "total": 5}, headers=auth).status_code == 201
        page.get(f"{base}/?min_duration=0&lang=en")
        form = page.find_element(By.ID, "token-view")
        poll(lambda: form.is_displayed(), 5, "the token form")
        page.find_element(By.ID, "token-input").send_keys("not-a-token")
        page.find_element(By.CSS_SELECTOR, "#token-form button").click()
        assert "hw_" in page.find_element(By.ID, "token-error").text
        field = page.find_element(By.ID, "token-input")
        field.clear()
        field.send_keys(reader)
        page.find_element(By.CSS_SELECTOR, "#token-form button").click()
        found = poll(lambda: row(page, "x"), 5, "the task, read with the token")
        poll(lambda: page.find_element(By.ID, "connection").get_attribute("data-state") == "live", 5, "Live with the token")
        assert not found.find_element(By.CSS_SELECTOR, ".cancel").is_displayed()
        assert js(page, "return sessionStorage.getItem('headway.token')") == reader
        assert httpx.post(f"{base}/v1/tasks/x/progress", json={"completed": 3}, headers=auth).status_code == 200
        bar = found.find_element(By.CSS_SELECTOR, ".bar")
        poll(lambda: bar.get_attribute("aria-valuenow") == "60", 5, "live over the stream with access_token")
        js(page, "sessionStorage.clear()")
        errors = [entry for entry in console_errors(page) if "401" not in entry["message"]]
        assert errors == []


def test_screenshots(page, headwayd, tmp_path):
    """Desktop light and dark, phone width, a stalled task, the detail view."""
    folder = screenshot_folder(tmp_path)
    desktop = {"width": 1280, "height": 960, "deviceScaleFactor": 1, "mobile": False}
    register(headwayd, id="thumbnails", name="Make thumbnails", total=300, unit="images")
    register(headwayd, id="backup-db-3", name="Nightly backup of db-3", total=1200, unit="files")
    register(headwayd, id="encode", name="Encode lecture videos", label="Waiting for the encoder",
             stall_timeout_seconds=1)
    register(headwayd, id="reindex", name="Rebuild search index", label="Scanning documents")
    register(headwayd, id="deploy", name="Deploy release 2.4")
    register(headwayd, id="deploy.build", name="Build images", parent_id="deploy", total=8, unit="images")
    register(headwayd, id="deploy.push", name="Push images", parent_id="deploy", total=8, unit="images")
    register(headwayd, id="photos", name="Copy photos to archive", total=5000, unit="photos")
    for step in range(1, 5):
        progress(headwayd, "backup-db-3", completed=step * 40)
        progress(headwayd, "photos", completed=step * 150)
        progress(headwayd, "thumbnails", completed=step * 60)
        if step < 4:
            progress(headwayd, "deploy.build", completed=step * 2)
        assert httpx.post(f"{headwayd}/v1/tasks/reindex/heartbeat", json={"label": f"Scanning documents ({step * 1000})"}).status_code == 200
        time.sleep(1.1)
    progress(headwayd, "deploy.push", completed=2)
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", desktop)
    open_dashboard(page, headwayd, "lang=en")
    poll(lambda: row(page, "encode") and "stalled" in row(page, "encode").get_attribute("class"), 10, "stalled")
    assert httpx.post(f"{headwayd}/v1/tasks/thumbnails/finish", json={"outcome": "succeeded"}).status_code == 200
    poll(lambda: "finished" in row(page, "thumbnails").get_attribute("class"), 5, "finished")
    poll(lambda: page.find_element(By.CSS_SELECTOR, '[data-filter="finished"] .count').text == "1", 5, "the tab counts")
    page.find_element(By.CSS_SELECTOR, '#tasks > li[data-task-id="deploy"] .expander').click()
    poll(lambda: len(page.find_elements(By.CSS_SELECTOR, '[data-task-id="deploy"] .children > li')) == 2, 5, "children")
    time.sleep(0.6)  # let the bars finish their transition
    page.save_screenshot(str(folder / "desktop-light.png"))
    stalled = row(page, "encode")
    js(page, "arguments[0].scrollIntoView({block: 'center'})", stalled)
    time.sleep(0.2)
    stalled.screenshot(str(folder / "stalled-task.png"))
    js(page, "window.scrollTo(0, 0)")
    page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    time.sleep(0.3)
    page.save_screenshot(str(folder / "desktop-dark.png"))
    page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                         {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    time.sleep(0.3)
    page.save_screenshot(str(folder / "phone.png"))
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", desktop)
    page.find_element(By.CSS_SELECTOR, '#tasks > li[data-task-id="photos"] .name').click()
    poll(lambda: page.find_element(By.ID, "detail-view").is_displayed(), 5, "the detail view")
    poll(lambda: js(page, "return document.querySelectorAll('#chart polyline').length") == 1, 5, "the chart")
    poll(lambda: page.find_element(By.ID, "zoom-text").text.endswith("points"), 5, "the zoom")
    time.sleep(0.6)
    page.save_screenshot(str(folder / "detail.png"))
    page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    # Zoom stays within 2..1000 points.
    for _ in range(12):
        button = page.find_element(By.ID, "zoom-in")
        if not button.is_enabled():
            break
        button.click()
    poll(lambda: page.find_element(By.ID, "zoom-text").text == "Detail: up to 1,000 points", 5, "at most 1000 points")
    for _ in range(12):
        button = page.find_element(By.ID, "zoom-out")
        if not button.is_enabled():
            break
        button.click()
    poll(lambda: page.find_element(By.ID, "zoom-text").text == "Detail: up to 2 points", 5, "at least 2 points")
    assert console_errors(page) == []
    for name in ["desktop-light", "desktop-dark", "phone", "stalled-task", "detail"]:
        assert (folder / f"{name}.png").stat().st_size > 1000


def ids_on_page(driver):
    return js(driver, "return [...document.querySelectorAll('#tasks > li')].map((li) => li.dataset.taskId)")


def test_the_page_fills_again_when_rows_leave(page, headwayd):
    with movable_clock(page):
        for number in range(25):
            register(headwayd, id=f"r{number:02d}", name=f"Run {number:02d}", total=10)
        open_dashboard(page, headwayd)
        page_text = page.find_element(By.ID, "page-text")
        poll(lambda: page_text.text == "Page 1 of 2" and len(ids_on_page(page)) == 20, 5, "Page 1 of 2")
        for number in range(24, 14, -1):
            assert httpx.post(f"{headwayd}/v1/tasks/r{number:02d}/finish", json={"outcome": "succeeded"}).status_code == 200
        poll(lambda: len(page.find_elements(By.CSS_SELECTOR, "#tasks > li.finished")) == 10, 5, "ten finished, dimmed")
        js(page, "window.clockOffset = 61000")
        # The finished rows leave and the page is filled again from the server.
        poll(lambda: ids_on_page(page) == [f"r{n:02d}" for n in range(14, -1, -1)], 8, "the 15 running tasks")
        poll(lambda: page_text.text == "Page 1 of 1", 5, "Page 1 of 1")
        assert not page.find_element(By.ID, "next-page").is_enabled()
        assert console_errors(page) == []


def test_the_pager_follows_new_tasks(page, headwayd):
    for number in range(20):
        register(headwayd, id=f"p{number:02d}", name=f"Pager {number:02d}", total=10)
    open_dashboard(page, headwayd)
    page_text = page.find_element(By.ID, "page-text")
    next_page = page.find_element(By.ID, "next-page")
    poll(lambda: page_text.text == "Page 1 of 1" and len(ids_on_page(page)) == 20, 5, "Page 1 of 1")
    assert not next_page.is_enabled()
    register(headwayd, id="p20", name="Pager 20", total=10)
    poll(lambda: ids_on_page(page)[:1] == ["p20"], 5, "the new task on top")
    poll(lambda: page_text.text == "Page 1 of 2" and next_page.is_enabled(), 5, "Page 1 of 2, Next enabled")
    next_page.click()
    poll(lambda: page_text.text == "Page 2 of 2" and ids_on_page(page) == ["p00"], 5, "the second page")
    for number in range(21, 41):
        register(headwayd, id=f"p{number:02d}", name=f"Pager {number:02d}", total=10)
    # On page 2 the count follows too, and the rows stay.
    poll(lambda: page_text.text == "Page 2 of 3", 5, "Page 2 of 3")
    assert ids_on_page(page) == ["p00"]
    assert console_errors(page) == []


def test_the_page_keeps_only_what_it_shows(page, headwayd):
    open_dashboard(page, headwayd)
    with httpx.Client() as client:
        for number in range(300):
            assert client.post(f"{headwayd}/v1/tasks", json={"id": f"c{number:03d}", "name": "Churn", "total": 1}).status_code == 201
            assert client.post(f"{headwayd}/v1/tasks/c{number:03d}/finish", json={"outcome": "succeeded"}).status_code == 200
    finished = page.find_element(By.CSS_SELECTOR, '[data-filter="finished"] .count')
    poll(lambda: finished.text == "300", 15, "the churn counted")
    poll(lambda: ids_on_page(page)[:1] == ["c299"], 5, "the newest on top")
    # The model is trimmed as events arrive and the rows at the next frame: wait for both.
    bounded = ("modelTasks", "modelFinished", "renderedRows", "domRows")
    stats = poll(lambda: (lambda s: s if all(s[key] <= 25 for key in bounded) else None)(
        js(page, "const s = headwayStats; return {modelTasks: s.modelTasks, modelFinished: s.modelFinished,"
                 " renderedRows: s.renderedRows, renderedIDs: s.renderedIDs, domRows: s.domRows}")), 5,
        "the model and the rows bounded")
    assert all(stats[key] <= 25 for key in bounded), stats
    assert len(ids_on_page(page)) == 20
    assert console_errors(page) == []


def test_the_stall_age_counts_from_the_last_signal(page, headwayd):
    open_dashboard(page, headwayd)
    registered = time.monotonic()
    register(headwayd, id="quiet", name="Quiet", stall_timeout_seconds=3)
    found = poll(lambda: row(page, "quiet"), 5, "the row")
    poll(lambda: "stalled" in found.get_attribute("class"), 10, "stalled")
    poll(lambda: time.monotonic() - registered > 4.2, 5, "4 s since the last signal")
    stall = found.find_element(By.CSS_SELECTOR, ".stall").text
    seconds = int("".join(ch for ch in stall if ch.isdigit()))
    assert stall.startswith("No signal for") and seconds >= 3, stall


def test_a_task_that_stops_matching_the_filter_leaves(page, headwayd):
    register(headwayd, id="calm", name="Calm")
    open_dashboard(page, headwayd)
    register(headwayd, id="stuck", name="Stuck", stall_timeout_seconds=1)
    page.find_element(By.CSS_SELECTOR, '[data-filter="stalled"]').click()
    poll(lambda: ids_on_page(page) == ["stuck"], 10, "the stalled task under Stalled")
    assert httpx.post(f"{headwayd}/v1/tasks/stuck/heartbeat", json={}).status_code == 200
    poll(lambda: ids_on_page(page) == [], 5, "the recovered task gone from Stalled")
    assert console_errors(page) == []


def test_phone_width_does_not_scroll_sideways(page, headwayd):
    register(headwayd, id="w" * 80, name="N" * 90, total=10, unit="u" * 64, label="L" * 120)
    register(headwayd, id="plain", name="Plain", total=5, unit="files")
    progress(headwayd, "w" * 80, completed=3)
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 360, "height": 740, "deviceScaleFactor": 1, "mobile": True})
    try:
        open_dashboard(page, headwayd)
        poll(lambda: row(page, "w" * 80), 5, "the long row")
        width = "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        scroll, client = js(page, width)
        assert scroll <= client, (scroll, client)
        page.get(f"{headwayd}/?min_duration=0&lang=en#task={'w' * 80}")
        poll(lambda: "u" * 64 in page.find_element(By.ID, "fields").text, 5, "the detail view")
        scroll, client = js(page, width)
        assert scroll <= client, (scroll, client)
    finally:
        page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_new_tasks_wait_above_a_scrolled_list(page, headwayd):
    for number in range(20):
        register(headwayd, id=f"s{number:02d}", name=f"Scroll {number:02d}", total=10)
    open_dashboard(page, headwayd)
    poll(lambda: len(ids_on_page(page)) == 20, 5, "20 rows")
    js(page, "window.scrollTo(0, 300)")
    poll(lambda: js(page, "return scrollY") > 0, 2, "scrolled")
    target = row(page, "s10")
    top = js(page, "return arguments[0].getBoundingClientRect().top", target)
    register(headwayd, id="fresh", name="Fresh", total=10)
    button = page.find_element(By.ID, "new-tasks")
    poll(lambda: button.is_displayed() and button.text == "1 new task", 5, "1 new task offered")
    assert row(page, "fresh") is None and ids_on_page(page)[0] == "s19"
    assert abs(js(page, "return arguments[0].getBoundingClientRect().top", target) - top) < 1
    button.click()
    poll(lambda: ids_on_page(page)[0] == "fresh", 5, "the new task shown on top")
    assert js(page, "return scrollY") == 0 and not button.is_displayed()
    assert console_errors(page) == []


def test_the_focus_returns_to_the_task_after_the_detail_view(page, headwayd):
    register(headwayd, id="one", name="One", total=10)
    register(headwayd, id="two", name="Two", total=10)
    open_dashboard(page, headwayd)
    link = poll(lambda: row(page, "one"), 5, "the row").find_element(By.CSS_SELECTOR, ".name")
    link.send_keys(Keys.ENTER)
    poll(lambda: page.find_element(By.ID, "detail-view").is_displayed(), 5, "the detail view")
    page.switch_to.active_element.send_keys(Keys.ESCAPE)
    poll(lambda: page.find_element(By.ID, "list-view").is_displayed(), 5, "the list")
    poll(lambda: page.switch_to.active_element.text == "One", 2, "the focus on the task's link")
    assert console_errors(page) == []


def test_the_detail_view_of_a_missing_task_or_a_bad_link(page, headwayd):
    register(headwayd, id="real", name="Real task", total=10)
    open_dashboard(page, headwayd)
    page.get(f"{headwayd}/?min_duration=0&lang=en#task=real")
    poll(lambda: page.find_element(By.ID, "detail-heading").text == "Real task", 5, "the real task")
    poll(lambda: len(page.find_elements(By.CSS_SELECTOR, "#detail-row li")) == 1, 5, "its row")
    js(page, "location.hash = '#task=nothing-here'")
    problem = page.find_element(By.ID, "detail-problem")
    poll(lambda: problem.is_displayed() and "nothing-here" in problem.text, 5, "no such task")
    assert page.find_elements(By.CSS_SELECTOR, "#detail-row li") == []
    assert not page.find_element(By.ID, "fields").is_displayed()
    assert page.find_element(By.ID, "fields").text == ""
    js(page, "location.hash = '#task=%E0%A4%A'")
    poll(lambda: "does not name a task" in problem.text, 5, "a malformed link")
    js(page, "location.hash = '#task=real'")
    poll(lambda: page.find_element(By.ID, "detail-heading").text == "Real task", 5, "the real task again")
    js(page, "location.hash = '#task=..'")
    poll(lambda: page.find_element(By.ID, "detail-heading").text == "Task not shown", 5, "'..' is no task")
    # The browser logs the 404 of the missing task's fetch; nothing else.
    assert [entry for entry in console_errors(page) if "nothing-here" not in entry["message"]] == []


def test_tokens_that_cannot_read_or_were_revoked(page, tmp_path):
    tmp_path.mkdir(exist_ok=True)
    admin = make_token(tmp_path, "admin")
    reporter = make_token(tmp_path, "report")
    reader = make_token(tmp_path, "read")
    limited = subprocess.run([HEADWAYD, "token", "create", "--scope", "read", "--task-prefix", "team-", "--name", "team",
                              "--db", str(tmp_path / "headway.db")], capture_output=True, text=True, check=True).stdout.strip()
    with run_headwayd(tmp_path) as base:
        auth = {"Authorization": f"Bearer {admin}"}
        assert httpx.post(f"{base}/v1/tasks", json={"id": "x", "name": "Export", "total": 5}, headers=auth).status_code == 201
        page.get(f"{base}/?min_duration=0&lang=en")
        form = page.find_element(By.ID, "token-view")
        poll(lambda: form.is_displayed(), 5, "the token form")
        page.find_element(By.ID, "token-input").send_keys(reporter)
        page.find_element(By.CSS_SELECTOR, "#token-form button").click()
        error = page.find_element(By.ID, "token-error")
        poll(lambda: "cannot read tasks" in error.text, 5, "a token without read")
        assert form.is_displayed()
        assert js(page, "return sessionStorage.getItem('headway.token')") is None
        connection = page.find_element(By.ID, "connection")
        time.sleep(1.5)  # no retry loop behind the form, not an assertion on time
        assert form.is_displayed() and "Offline" not in connection.text and "Reconnecting" not in connection.text
        field = page.find_element(By.ID, "token-input")
        field.send_keys(reader)
        page.find_element(By.CSS_SELECTOR, "#token-form button").click()
        poll(lambda: row(page, "x"), 5, "the task, read with the token")
        poll(lambda: connection.get_attribute("data-state") == "live", 5, "Live")
        listed = httpx.get(f"{base}/v1/tokens", headers=auth).json()
        tokens = listed.get("tokens", listed) if isinstance(listed, dict) else listed
        for token in tokens:
            if token.get("name") == "wall" and "read" in token["scopes"] and "admin" not in token["scopes"]:
                assert httpx.delete(f"{base}/v1/tokens/{token['id']}", headers=auth).status_code in (200, 204)
        poll(lambda: form.is_displayed(), 15, "the form again once the token is revoked")
        assert js(page, "return sessionStorage.getItem('headway.token')") is None
        assert connection.text == "Needs a token"
        # A token limited to other tasks: the detail view of one it may not see says so.
        js(page, "sessionStorage.setItem('headway.token', arguments[0])", limited)
        page.get(f"{base}/?lang=en#task=x")  # another address than the page's: a new load
        problem = page.find_element(By.ID, "detail-problem")
        poll(lambda: problem.is_displayed() and "x" in problem.text, 5, "the task not shown")
        assert page.find_elements(By.CSS_SELECTOR, "#detail-row li") == [] and not page.find_element(By.ID, "fields").is_displayed()
        js(page, "sessionStorage.clear()")


def test_names_that_show_nothing_or_reorder(page, headwayd):
    register(headwayd, id="blank", name="\u200b\u200b", total=2)
    register(headwayd, id="bidi", name="\u202eevil name", total=2)
    open_dashboard(page, headwayd)
    blank = poll(lambda: row(page, "blank"), 5, "the blank-named row")
    assert blank.find_element(By.CSS_SELECTOR, ".name").text == "blank"
    name = poll(lambda: row(page, "bidi"), 5, "the bidi row").find_element(By.CSS_SELECTOR, ".name")
    assert js(page, "return getComputedStyle(arguments[0]).unicodeBidi", name) == "isolate"


def test_pager_buttons_wait_for_the_first_listing(headwayd):
    html = httpx.get(f"{headwayd}/").text
    for button in ["prev-page", "next-page"]:
        tag = html[html.index(f'id="{button}"'):]
        assert " disabled" in tag[:tag.index(">")], button


def test_a_longer_min_duration_removes_shorter_rows(page, headwayd):
    register(headwayd, id="young", name="Young", total=2)
    open_dashboard(page, headwayd)
    poll(lambda: row(page, "young"), 5, "the row")
    field = page.find_element(By.ID, "min-duration")
    field.clear()
    field.send_keys("600", Keys.ENTER)
    js(page, "arguments[0].dispatchEvent(new Event('change'))", field)
    poll(lambda: row(page, "young") is None, 5, "the young task hidden")
    assert console_errors(page) == []


def test_the_header_lines_up_with_the_page_on_a_wall(page, headwayd):
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 2560, "height": 1440, "deviceScaleFactor": 1, "mobile": False})
    try:
        open_dashboard(page, headwayd)
        left = lambda selector: js(page, f"return document.querySelector('{selector}').getBoundingClientRect().left")
        assert abs(left(".top h1") - left(".toolbar")) <= 1
        right = js(page, "return document.querySelector('.settings').getBoundingClientRect().right")
        assert abs(right - js(page, "return document.querySelector('.toolbar').getBoundingClientRect().right")) <= 1
    finally:
        page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_the_detail_rate_has_its_unit_and_history_follows_the_width(page, headwayd):
    register(headwayd, id="rated", name="Rated", total=1000, unit="files")
    for step in range(1, 6):  # the server reports a rate after a second of progress
        progress(headwayd, "rated", completed=step * 100)
        time.sleep(0.4)
    page.get(f"{headwayd}/?min_duration=0&lang=en#task=rated")
    fields = page.find_element(By.ID, "fields")
    poll(lambda: "files/s" in fields.text, 5, "the rate with its unit")
    zoom = page.find_element(By.ID, "zoom-text")
    poll(lambda: zoom.text.endswith("points"), 5, "the points")
    before = zoom.text
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 420, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    try:
        poll(lambda: zoom.text != before, 5, "fewer points for a narrower chart")
    finally:
        page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert console_errors(page) == []


def open_three_pages(page, headwayd, prefix, name):
    """Registers 45 tasks (`prefix`00 … `prefix`44) and opens the dashboard on page 1 of 3;
    returns the pager's text element."""
    for number in range(45):
        register(headwayd, id=f"{prefix}{number:02d}", name=f"{name} {number:02d}", total=10)
    open_dashboard(page, headwayd)
    page_text = page.find_element(By.ID, "page-text")
    poll(lambda: page_text.text == "Page 1 of 3" and len(ids_on_page(page)) == 20, 5, "Page 1 of 3")
    return page_text


def test_previous_back_to_page_one_shows_its_rows(page, headwayd):
    page_text = open_three_pages(page, headwayd, "b", "Base")
    page.find_element(By.ID, "next-page").click()
    poll(lambda: page_text.text == "Page 2 of 3" and ids_on_page(page)[:1] == ["b24"], 5, "page 2")
    js(page, "window.scrollTo(0, document.body.scrollHeight)")
    poll(lambda: js(page, "return scrollY") > 0, 2, "scrolled")
    page.find_element(By.ID, "prev-page").click()
    poll(lambda: page_text.text == "Page 1 of 3" and ids_on_page(page) == [f"b{n:02d}" for n in range(44, 24, -1)],
         5, "page 1's rows again")
    assert not page.find_element(By.ID, "new-tasks").is_displayed()
    assert not page.find_element(By.ID, "empty").is_displayed()
    assert console_errors(page) == []


def test_pager_clicks_wait_for_the_listing(page, headwayd):
    page_text = open_three_pages(page, headwayd, "d", "Double")
    js(page, "const next = document.getElementById('next-page'); next.click(); next.click();")
    poll(lambda: ids_on_page(page)[:1] == ["d24"] and page.find_element(By.ID, "next-page").is_enabled(), 5, "page 2's rows")
    assert page_text.text == "Page 2 of 3"
    assert console_errors(page) == []


def test_held_tasks_push_no_rows_off(page, headwayd):
    for number in range(20):
        register(headwayd, id=f"h{number:02d}", name=f"Held {number:02d}", total=10)
    open_dashboard(page, headwayd)
    poll(lambda: len(ids_on_page(page)) == 20, 5, "20 rows")
    shown = ids_on_page(page)
    link = row(page, "h01").find_element(By.CSS_SELECTOR, ".name")
    js(page, "arguments[0].focus()", link)
    for number in range(5):
        register(headwayd, id=f"new{number}", name=f"New {number}", total=10)
    button = page.find_element(By.ID, "new-tasks")
    poll(lambda: button.is_displayed() and button.text == "5 new tasks", 5, "5 new tasks offered")
    # The listing read again after the new tasks (the count follows) keeps every row.
    poll(lambda: page.find_element(By.ID, "page-text").text == "Page 1 of 2", 5, "the count read again")
    assert ids_on_page(page) == shown
    assert js(page, "return document.activeElement.closest('li')?.dataset.taskId") == "h01"
    button.click()
    poll(lambda: ids_on_page(page)[:5] == [f"new{n}" for n in range(4, -1, -1)] and len(ids_on_page(page)) == 20,
         5, "the new tasks on top, a page of rows")
    assert console_errors(page) == []


def test_young_tasks_on_the_first_page_do_not_blank_the_running_list(page, headwayd):
    for number in range(20):
        register(headwayd, id=f"o{number:02d}", name=f"Old {number:02d}", total=10)
    time.sleep(3.2)  # the tasks must be older than min_duration 3 (setup, not an assertion)
    open_dashboard(page, headwayd, "min_duration=3&lang=en")
    poll(lambda: len(ids_on_page(page)) == 20, 5, "20 old rows")
    js(page, """window.fewest = 99; const watch = () => {
        window.fewest = Math.min(window.fewest, document.querySelectorAll('#tasks > li').length);
        requestAnimationFrame(watch); }; watch();""")
    for number in range(25):
        register(headwayd, id=f"y{number:02d}", name=f"Young {number:02d}", total=10)
    # A finish makes the page read its listing again, whose first page is now young tasks
    # it hides: it reads on.
    assert httpx.post(f"{headwayd}/v1/tasks/o00/finish", json={"outcome": "succeeded"}).status_code == 200
    poll(lambda: js(page, "return performance.getEntriesByType('resource')"
                          ".filter((e) => e.name.includes('page_token')).length") > 0, 5, "a further page read")
    poll(lambda: page.find_element(By.ID, "page-text").text == "Page 1 of 3", 5, "the listing's count")
    assert js(page, "return window.fewest") == 20
    # Once they are old enough they come in on top (from the stream).
    poll(lambda: ids_on_page(page)[:1] == ["y24"], 8, "the young tasks once old enough")
    assert js(page, "return window.fewest") == 20
    assert console_errors(page) == []


def test_a_reread_keeps_the_running_rows_shown(page, headwayd):
    for number in range(20):
        register(headwayd, id=f"k{number:02d}", name=f"Kept {number:02d}", total=10)
    time.sleep(3.2)  # older than min_duration 3 (setup, not an assertion)
    open_dashboard(page, headwayd, "min_duration=3&lang=en")
    poll(lambda: len(ids_on_page(page)) == 20, 5, "20 rows")
    js(page, """window.fewest = 99; const watch = () => {
        window.fewest = Math.min(window.fewest, document.querySelectorAll('#tasks > li').length);
        requestAnimationFrame(watch); }; watch();""")
    # More young tasks than the pages the page reads on: the listing yields nothing to show.
    with httpx.Client() as client:
        for number in range(90):
            assert client.post(f"{headwayd}/v1/tasks", json={"id": f"z{number:02d}", "name": "Young", "total": 1}).status_code == 201
    assert httpx.post(f"{headwayd}/v1/tasks/k00/finish", json={"outcome": "succeeded"}).status_code == 200
    poll(lambda: js(page, "return performance.getEntriesByType('resource')"
                          ".filter((e) => e.name.includes('page_token')).length") >= 3, 5, "the listing read again")
    poll(lambda: page.find_element(By.ID, "page-text").text == "Page 1 of 6", 5, "the listing's count")
    poll(lambda: row(page, "k00") and "finished" in row(page, "k00").get_attribute("class"), 5, "k00 finished")
    assert js(page, "return window.fewest") == 20
    assert ids_on_page(page) == [f"k{n:02d}" for n in range(19, -1, -1)]
    assert console_errors(page) == []


def test_finished_views_list_short_tasks_too(page, headwayd):
    for number in range(3):
        register(headwayd, id=f"long{number}", name=f"Long {number}", total=10)
    time.sleep(2.2)
    for number in range(3):
        assert httpx.post(f"{headwayd}/v1/tasks/long{number}/finish", json={"outcome": "succeeded"}).status_code == 200
    for number in range(25):
        register(headwayd, id=f"short{number:02d}", name=f"Short {number:02d}", total=1)
        assert httpx.post(f"{headwayd}/v1/tasks/short{number:02d}/finish", json={"outcome": "succeeded"}).status_code == 200
    open_dashboard(page, headwayd, "min_duration=2&lang=en")
    page_text = page.find_element(By.ID, "page-text")
    for view in ["finished", "all"]:
        page.find_element(By.CSS_SELECTOR, f'[data-filter="{view}"]').click()
        poll(lambda: page_text.text == "Page 1 of 2" and ids_on_page(page)[:1] == ["short24"]
             and len(ids_on_page(page)) == 20, 5, f"{view}: short tasks listed")
    page.find_element(By.CSS_SELECTOR, '[data-filter="running"]').click()
    poll(lambda: page.find_element(By.ID, "empty").is_displayed(), 5, "running: nothing")
    assert console_errors(page) == []


def test_a_deleted_task_stays_gone_when_an_older_listing_arrives(page, headwayd):
    register(headwayd, id="gone", name="Gone", total=10)
    register(headwayd, id="stays", name="Stays", total=10)
    open_dashboard(page, headwayd)
    poll(lambda: row(page, "gone") and row(page, "stays"), 5, "both rows")
    # Listings answer late: one started before the delete arrives after it.
    js(page, """window.listingsStarted = 0; window.lateListings = 0; const realFetch = window.fetch;
        window.fetch = async (...args) => {
          const listing = String(args[0]).startsWith('/v1/tasks?');
          if (listing) window.listingsStarted += 1;
          const reply = await realFetch(...args);
          if (listing) {
            await new Promise((done) => setTimeout(done, 1000));
            window.lateListings += 1;
          }
          return reply;
        };""")
    register(headwayd, id="trigger", name="Trigger", total=10)
    poll(lambda: js(page, "return window.listingsStarted") >= 1, 5, "a listing under way")
    assert httpx.delete(f"{headwayd}/v1/tasks/gone").status_code in (200, 204)
    poll(lambda: row(page, "gone") is None, 5, "the row gone")
    js(page, """window.resurrected = false; const watch = () => {
        if (document.querySelector('#tasks > li[data-task-id="gone"]')) window.resurrected = true;
        requestAnimationFrame(watch); }; watch();""")
    # The listing from before the delete, and the one after it.
    poll(lambda: js(page, "return window.lateListings") >= 2, 10, "the late listings arrived")
    poll(lambda: row(page, "trigger"), 5, "the new task")
    assert js(page, "return window.resurrected") is False
    # A task made again under the id shows.
    register(headwayd, id="gone", name="Gone again", total=10)
    poll(lambda: row(page, "gone") and "Gone again" in row(page, "gone").text, 8, "the id used again")
    assert console_errors(page) == []


def test_the_cancel_confirmation_focuses_keep_running(page, headwayd):
    register(headwayd, id="careful", name="Careful", total=10)
    open_dashboard(page, headwayd)
    found = poll(lambda: row(page, "careful"), 5, "the row")
    found.find_element(By.CSS_SELECTOR, ".cancel").click()
    poll(lambda: page.switch_to.active_element.text == "Keep running", 2, "the focus on Keep running")
    page.switch_to.active_element.send_keys(Keys.ENTER)
    poll(lambda: found.find_element(By.CSS_SELECTOR, ".cancel").is_displayed(), 2, "Cancel again")
    assert httpx.get(f"{headwayd}/v1/tasks/careful").json()["cancel_requested"] is False
    assert console_errors(page) == []


def test_the_detail_view_reads_history_only_on_new_progress(page, headwayd):
    register(headwayd, id="slow", name="Slow", total=100, stall_timeout_seconds=1)
    progress(headwayd, "slow", completed=10)
    page.get(f"{headwayd}/?min_duration=0&lang=en#task=slow")
    fields = page.find_element(By.ID, "fields")
    poll(lambda: "No signal for" in fields.text, 10, "stalled in the detail view")
    histories = "return performance.getEntriesByType('resource').filter((e) => e.name.includes('/history')).length"
    stall = lambda: next(line for line in fields.text.splitlines() if line.startswith("No signal for"))
    first = stall()
    # The page's clock ticks on (the stall's age counting twice) without another read.
    seen = poll(lambda: stall() != first and stall(), 5, "the age counting")
    poll(lambda: stall() != seen, 5, "the age counting again")
    assert js(page, histories) == 1
    progress(headwayd, "slow", completed=20)
    poll(lambda: js(page, histories) == 2, 5, "read again on new progress")
    assert console_errors(page) == []


def test_bidi_controls_are_stripped_and_links_checked(page, headwayd):
    register(headwayd, id="rev", name="\u202eevil\u202c name", label="\u2066label\u2069 \u200fhere", total=10)
    open_dashboard(page, headwayd)
    found = poll(lambda: row(page, "rev"), 5, "the row")
    assert js(page, "return arguments[0].textContent", found.find_element(By.CSS_SELECTOR, ".name")) == "evil name"
    assert js(page, "return arguments[0].textContent", found.find_element(By.CSS_SELECTOR, ".label")) == "label here"
    problem = page.find_element(By.ID, "detail-problem")
    for link in ["a%2Fb", "x" * 300, "a%20b"]:
        js(page, "location.hash = ''")
        poll(lambda: page.find_element(By.ID, "list-view").is_displayed(), 5, "the list")
        js(page, "location.hash = arguments[0]", f"#task={link}")
        poll(lambda: problem.is_displayed() and "does not name a task" in problem.text, 5, f"{link[:20]} is no task")
    assert console_errors(page) == []


def test_a_search_without_a_match_says_so(page, headwayd):
    register(headwayd, id="one", name="Alpha", total=10)
    open_dashboard(page, headwayd)
    poll(lambda: row(page, "one"), 5, "the row")
    page.find_element(By.ID, "search").send_keys("zzz")
    empty = page.find_element(By.ID, "empty")
    poll(lambda: empty.is_displayed() and "contains" in empty.text and "zzz" in empty.text, 5, "no match")
    assert console_errors(page) == []


@contextlib.contextmanager
def frozen_wall_clock(page):
    """The page's wall clock (`Date.now`) made settable from the test for the pages loaded
    meanwhile: `window.frozenNow` (milliseconds since 1970) when set, the real time else."""
    script = page.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        window.frozenNow = null;
        const realDateNow = Date.now.bind(Date);
        Date.now = () => window.frozenNow ?? realDateNow();"""})
    try:
        yield lambda millis: js(page, "window.frozenNow = arguments[0]", millis)
    finally:
        page.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]})


def millis(timestamp):
    """Milliseconds since 1970 of an RFC 3339 time of the API."""
    from datetime import datetime
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


def test_no_signal_counts_from_the_last_signal_not_the_first_stall(page, headwayd):
    """Issue 46 item 2: a task flagged no_progress, then silent, keeps stalled_since at the
    first stall's start; "No signal for" is now − last_signal_at all the same."""
    with frozen_wall_clock(page) as set_now:
        created = register(headwayd, id="quiet", name="Quiet", total=100, stall_timeout_seconds=3,
                           progress_timeout_seconds=1)
        open_dashboard(page, headwayd)
        found = poll(lambda: row(page, "quiet"), 5, "the row")
        stall = found.find_element(By.CSS_SELECTOR, ".stall")
        poll(lambda: httpx.get(f"{headwayd}/v1/tasks/quiet").json()["stall_reason"] == "silent", 10, "silent")
        task = httpx.get(f"{headwayd}/v1/tasks/quiet").json()
        last_signal = task.get("last_signal_at") or created["created_at"]
        set_now(millis(last_signal) + 30_000)
        poll(lambda: stall.text == "No signal for 30 sec", 3, "No signal for 30 sec (from last_signal_at)")


def test_no_progress_counts_from_the_last_progress(page, headwayd):
    with frozen_wall_clock(page) as set_now:
        register(headwayd, id="busy", name="Busy", total=100, progress_timeout_seconds=1, stall_timeout_seconds=60)
        progress(headwayd, "busy", completed=5)
        open_dashboard(page, headwayd)
        found = poll(lambda: row(page, "busy"), 5, "the row")
        poll(lambda: httpx.post(f"{headwayd}/v1/tasks/busy/heartbeat", json={}).json()["stalled"], 10, "no progress")
        task = httpx.get(f"{headwayd}/v1/tasks/busy").json()
        set_now(millis(task["last_progress_at"]) + 95_000)
        stall = found.find_element(By.CSS_SELECTOR, ".stall")
        poll(lambda: stall.text == "No progress for 2 min", 3, "No progress for 2 min (95 s from last_progress_at)")


def test_one_percent_rule_floor_and_100_only_at_1(page, headwayd):
    """29 of 100 is 29% (0.29 × 100 is 28.999… in binary); 119 of 120 is 99%."""
    register(headwayd, id="p29", name="Twenty-nine", total=100)
    register(headwayd, id="p119", name="Almost", total=120)
    progress(headwayd, "p29", completed=29)
    progress(headwayd, "p119", completed=119)
    open_dashboard(page, headwayd)
    bar = poll(lambda: row(page, "p29"), 5, "the row").find_element(By.CSS_SELECTOR, ".bar")
    poll(lambda: bar.get_attribute("aria-valuenow") == "29", 5, "29, not 28")
    assert "29%" in row(page, "p29").text
    assert row(page, "p119").find_element(By.CSS_SELECTOR, ".bar").get_attribute("aria-valuenow") == "99"


def test_a_failed_row_says_why_when_and_how_long(page, headwayd):
    with frozen_wall_clock(page) as set_now:
        made = register(headwayd, id="import", name="Import customers", total=500)
        progress(headwayd, "import", completed=120)
        reply = httpx.post(f"{headwayd}/v1/tasks/import/finish",
                           json={"outcome": "failed", "message": "CSV row 121: bad date"})
        assert reply.status_code == 200
        finished = reply.json()
        open_dashboard(page, headwayd)
        page.find_element(By.CSS_SELECTOR, '[data-filter="failed"]').click()
        found = poll(lambda: row(page, "import"), 5, "the failed row")
        set_now(millis(finished["finished_at"]) + 3_600_000)
        message = found.find_element(By.CSS_SELECTOR, ".message")
        assert message.is_displayed() and message.text == "CSV row 121: bad date"
        # Legible, not greyed: the name and the message in the text colour, 4.5:1 at least.
        for part in [".name", ".message", ".facts .when"]:
            assert contrast(page, found.find_element(By.CSS_SELECTOR, part)) >= 4.5, part
        text_colour = js(page, "return getComputedStyle(document.body).color")
        assert js(page, "return getComputedStyle(arguments[0]).color", found.find_element(By.CSS_SELECTOR, ".name")) == text_colour
        assert js(page, "return getComputedStyle(arguments[0]).color", message) == text_colour
        assert js(page, "return getComputedStyle(arguments[0]).opacity", found.find_element(By.CSS_SELECTOR, ".bar")) == "1"
        when = found.find_element(By.CSS_SELECTOR, ".facts .when").text
        ran = (millis(finished["finished_at"]) - millis(made["created_at"])) // 1000
        assert when.startswith("Ended ") and when.endswith(f"ran {ran} sec"), when
        assert "Failed" in found.find_element(By.CSS_SELECTOR, ".badge").text
        assert console_errors(page) == []


def listing_arrived(page, state):
    """Whether a GET /v1/tasks?…state=`state`… has been answered (its rows drawn a frame later)."""
    return js(page, """return performance.getEntriesByType("resource")
        .some((entry) => entry.name.includes("/v1/tasks?") && entry.name.includes(`state=${arguments[0]}`)
                         && entry.responseEnd > 0)""", state)


def test_a_row_is_kept_not_drawn_again_when_another_tab_lists_its_task(page, headwayd):
    """Issue 49 item 6: a row shown under All whose task the Failed tab lists too is the same
    element under Failed, before and after the Failed listing arrives (a reference to it,
    a reader's focus on it, stays good)."""
    register(headwayd, id="import", name="Import customers", total=500)
    assert httpx.post(f"{headwayd}/v1/tasks/import/finish", json={"outcome": "failed"}).status_code == 200
    register(headwayd, id="other", name="Other", total=5)
    open_dashboard(page, headwayd)
    page.find_element(By.CSS_SELECTOR, '[data-filter="all"]').click()
    shown = poll(lambda: row(page, "import"), 5, "the row under All")
    poll(lambda: row(page, "other"), 5, "the running row under All")
    page.find_element(By.CSS_SELECTOR, '[data-filter="failed"]').click()
    poll(lambda: listing_arrived(page, "failed"), 5, "the Failed listing")
    poll(lambda: row(page, "other") is None, 5, "the running row gone from Failed")
    assert js(page, "return arguments[0].isConnected", shown)
    assert row(page, "import") == shown
    assert "Import customers" in shown.text


def test_a_running_row_says_how_long_and_when_last_heard(page, headwayd):
    with frozen_wall_clock(page) as set_now:
        made = register(headwayd, id="run", name="Long run", total=100, stall_timeout_seconds=600)
        open_dashboard(page, headwayd)
        found = poll(lambda: row(page, "run"), 5, "the row")
        set_now(millis(made["created_at"]) + 2_000)
        signal = found.find_element(By.CSS_SELECTOR, ".facts .signal")
        when = found.find_element(By.CSS_SELECTOR, ".facts .when")
        poll(lambda: when.text == "Running for 2 sec", 3, "running for 2 s")
        assert not signal.is_displayed()  # heard from a moment ago: nothing to say
        set_now(millis(made["created_at"]) + 185_000)
        poll(lambda: when.text == "Running for 3 min", 3, "running for 3 min")
        last = httpx.get(f"{headwayd}/v1/tasks/run").json().get("last_signal_at", made["created_at"])
        assert last == made["created_at"]
        poll(lambda: signal.text == "last signal 3 min ago", 3, "last signal 3 min ago")


def test_a_collapsed_parent_shows_attention_and_child_counts(page, headwayd):
    register(headwayd, id="p", name="Nightly jobs")
    register(headwayd, id="p.a", name="Export", parent_id="p", total=10)
    register(headwayd, id="p.b", name="Index", parent_id="p", total=10, stall_timeout_seconds=1)
    register(headwayd, id="p.c", name="Mail", parent_id="p", total=10)
    for child in ["p.a", "p.b", "p.c"]:
        progress(headwayd, child, completed=5)
    assert httpx.post(f"{headwayd}/v1/tasks/p.a/finish", json={"outcome": "failed", "message": "disk full"}).status_code == 200
    open_dashboard(page, headwayd)
    parent = poll(lambda: row(page, "p"), 5, "the parent")
    # Keep p.c talking so only p.b stalls.
    kids = parent.find_element(By.CSS_SELECTOR, ".kids")
    def settled():
        progress(headwayd, "p.c", completed=6) if httpx.get(f"{headwayd}/v1/tasks/p.c").json()["completed"] < 6 else None
        httpx.post(f"{headwayd}/v1/tasks/p.c/heartbeat", json={})
        return kids.text == "1 of 3 failed · 1 stalled"
    poll(settled, 10, "1 of 3 failed · 1 stalled")
    badge = parent.find_element(By.CSS_SELECTOR, ".badge")
    assert badge.text == "Part failed" and badge.get_attribute("data-state") == "attention_failed"
    assert parent.find_element(By.CSS_SELECTOR, ".eta").text == ""
    assert js(page, "return getComputedStyle(arguments[0]).color", badge) != js(
        page, "return getComputedStyle(arguments[0]).color", page.find_element(By.CSS_SELECTOR, '[data-filter="running"]'))
    assert console_errors(page) == []


def test_the_detail_page_shows_the_output_tail_live(page, headwayd):
    register(headwayd, id="build", name="Build", total=10)
    progress(headwayd, "build", completed=1, output=["compiling a.c", "compiling b.c"])
    page.get(f"{headwayd}/?min_duration=0&lang=en#task=build")
    output = page.find_element(By.ID, "output")
    poll(lambda: output.is_displayed() and output.text == "compiling a.c\ncompiling b.c", 5, "the tail")
    progress(headwayd, "build", completed=2, output=["linking"])
    poll(lambda: output.text.endswith("compiling b.c\nlinking"), 5, "the new line, live")
    assert console_errors(page) == []


def test_tabs_count_their_tasks(page, headwayd):
    for number in range(3):
        register(headwayd, id=f"r{number}", name=f"Run {number}", total=10)
    register(headwayd, id="bad", name="Bad", total=10)
    assert httpx.post(f"{headwayd}/v1/tasks/bad/finish", json={"outcome": "failed"}).status_code == 200
    # A child is listed under its parent, not in the Running tab, so that tab does not count
    # it; its failure is listed in the Failed tab, which does.
    register(headwayd, id="r0-child", name="Run 0 child", total=10, parent_id="r0")
    assert httpx.post(f"{headwayd}/v1/tasks/r0-child/finish", json={"outcome": "failed"}).status_code == 200
    open_dashboard(page, headwayd)
    count = lambda name: page.find_element(By.CSS_SELECTOR, f'[data-filter="{name}"] .count').text
    poll(lambda: (count("running"), count("failed"), count("finished"), count("all")) == ("3", "2", "1", "4"), 5, "counts")
    assert page.find_element(By.CSS_SELECTOR, '[data-filter="running"]').get_attribute("aria-label") == "Running, 3 tasks"
    register(headwayd, id="r9", name="Run 9", total=10)
    poll(lambda: count("running") == "4", 5, "the count follows")
    assert console_errors(page) == []


def test_the_pager_is_above_and_below_and_next_starts_at_the_top(page, headwayd):
    page_text = open_three_pages(page, headwayd, "g", "Paged")
    top = page.find_element(By.ID, "page-text-top")
    assert top.is_displayed() and top.text == "Page 1 of 3"
    js(page, "window.scrollTo(0, document.body.scrollHeight)")
    poll(lambda: js(page, "return scrollY") > 0, 2, "scrolled to the bottom")
    page.find_element(By.ID, "next-page").click()
    poll(lambda: page_text.text == "Page 2 of 3" and top.text == "Page 2 of 3" and ids_on_page(page)[:1] == ["g24"], 5, "page 2")
    poll(lambda: js(page, "return scrollY") == 0, 2, "at the top")
    poll(lambda: page.switch_to.active_element.text == "Paged 24", 2, "the focus on the first row")
    page.find_element(By.ID, "next-page-top").click()
    poll(lambda: page_text.text == "Page 3 of 3" and ids_on_page(page)[:1] == ["g04"], 5, "page 3 from the top pager")
    assert not page.find_element(By.ID, "next-page-top").is_enabled()
    assert console_errors(page) == []


def test_the_new_tasks_cue_stays_in_sight(page, headwayd):
    for number in range(20):
        register(headwayd, id=f"s{number:02d}", name=f"Scroll {number:02d}", total=10)
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 1000, "height": 500, "deviceScaleFactor": 1, "mobile": False})
    try:
        open_dashboard(page, headwayd)
        poll(lambda: len(ids_on_page(page)) == 20, 5, "20 rows")
        js(page, "window.scrollTo(0, document.body.scrollHeight)")
        poll(lambda: js(page, "return scrollY") > 400, 2, "scrolled far down")
        register(headwayd, id="fresh", name="Fresh", total=10)
        button = page.find_element(By.ID, "new-tasks")
        poll(lambda: button.is_displayed(), 5, "the cue")
        top, bottom = js(page, "const r = arguments[0].getBoundingClientRect(); return [r.top, r.bottom]", button)
        assert 0 <= top and bottom <= 500, (top, bottom)
    finally:
        page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_offline_the_page_stands_still_and_says_why(page, tmp_path):
    port = free_port()
    with daemon_on(tmp_path, port) as base:
        register(base, id="scan", name="Scan", stall_timeout_seconds=600)
        register(base, id="copy", name="Copy", total=100)
        open_dashboard(page, base)
        sweep = poll(lambda: row(page, "scan"), 5, "the row").find_element(By.CSS_SELECTOR, ".activity .sweep")
        assert js(page, "return arguments[0].getAnimations().length", sweep) > 0
        cancel = row(page, "copy").find_element(By.CSS_SELECTOR, ".cancel")
        assert cancel.is_enabled()
    connection = page.find_element(By.ID, "connection")
    poll(lambda: connection.get_attribute("data-state") in ("reconnecting", "offline"), 10, "the stream lost")
    poll(lambda: js(page, "return arguments[0].getAnimations().length", sweep) == 0, 2, "the sweep standing still")
    assert not cancel.is_enabled()
    assert cancel.get_attribute("title") == "Unavailable while offline"
    note = page.find_element(By.ID, "offline-note")
    assert note.is_displayed() and "canceled" in note.text
    assert cancel.get_attribute("aria-describedby") == "offline-note"
    poll(lambda: connection.text.startswith("Offline since"), 20, "Offline since HH:MM")
    assert note.text.startswith("Offline since")


def test_a_failed_cancel_says_so_visibly_in_the_pages_language(page, headwayd):
    register(headwayd, id="job", name="사진 백업", total=100)
    open_dashboard(page, headwayd, "min_duration=0&lang=ko")
    found = poll(lambda: row(page, "job"), 5, "the row")
    # The request never reaches the server (what fetch calls "Failed to fetch").
    js(page, """const realFetch = window.fetch;
        window.fetch = (...args) => String(args[0]).includes('/cancel')
          ? Promise.reject(new TypeError('Failed to fetch')) : realFetch(...args);""")
    found.find_element(By.CSS_SELECTOR, ".cancel").click()
    poll(lambda: found.find_element(By.CSS_SELECTOR, ".confirm").is_displayed(), 2, "the confirmation")
    found.find_element(By.CSS_SELECTOR, ".confirm .yes").click()
    failure = found.find_element(By.CSS_SELECTOR, ".action-error")
    poll(lambda: failure.is_displayed(), 5, "the failure shown")
    assert failure.text == "취소하지 못했습니다: 서버에 연결할 수 없습니다"
    assert "Failed to fetch" not in page.find_element(By.TAG_NAME, "body").text
    assert contrast(page, failure) >= 4.5
    js(page, "localStorage.clear()")


def test_terminate_is_offered_once_a_cancel_goes_unanswered(page, headwayd):
    with movable_clock(page):
        register(headwayd, id="deaf", name="Deaf runner", total=100)
        open_dashboard(page, headwayd)
        found = poll(lambda: row(page, "deaf"), 5, "the row")
        found.find_element(By.CSS_SELECTOR, ".cancel").click()
        found.find_element(By.CSS_SELECTOR, ".confirm .yes").click()
        poll(lambda: found.find_element(By.CSS_SELECTOR, ".cancel").text == "Canceling…", 5, "Canceling…")
        terminate = found.find_element(By.CSS_SELECTOR, ".terminate")
        js(page, "window.clockOffset = 9000")
        time.sleep(1.2)  # a tick of the page's 1 s timer: not offered at 9 s
        assert not terminate.is_displayed()
        js(page, "window.clockOffset = 10500")
        poll(lambda: terminate.is_displayed(), 3, "Terminate offered after 10 s")
        assert terminate.get_attribute("aria-label") == "Terminate Deaf runner"
        terminate.click()
        question = found.find_element(By.CSS_SELECTOR, ".confirm")
        poll(lambda: question.is_displayed() and "Terminate “Deaf runner”?" in question.text, 2, "the confirmation")
        poll(lambda: page.switch_to.active_element.text == "Keep running", 2, "the focus on Keep running")
        found.find_element(By.CSS_SELECTOR, ".confirm .yes").click()
        poll(lambda: "finished" in found.get_attribute("class"), 5, "finished")
        task = httpx.get(f"{headwayd}/v1/tasks/deaf").json()
        assert task["state"] == "canceled" and task["message"] == "terminated"
        assert found.find_element(By.CSS_SELECTOR, ".message").text == "terminated"
        assert console_errors(page) == []


def test_a_parents_rate_is_never_zero_per_second(page, headwayd):
    register(headwayd, id="par", name="Parent")
    register(headwayd, id="par.k", name="Kid", parent_id="par", total=100000)
    for step in range(1, 5):  # the server reports a rate after a second of progress
        progress(headwayd, "par.k", completed=step * 10)
        time.sleep(0.4)
    assert httpx.get(f"{headwayd}/v1/tasks/par").json()["rate"] is not None
    page.get(f"{headwayd}/?min_duration=0&lang=en#task=par")
    fields = page.find_element(By.ID, "fields")
    poll(lambda: "Rate" in fields.text, 5, "the fields")
    rate = js(page, """const dts = [...document.querySelectorAll('#fields dt')];
        return dts.find((dt) => dt.textContent === 'Rate').nextElementSibling.textContent""")
    assert rate == "—"
    assert "0/s" not in page.find_element(By.ID, "detail-view").text
    # The detail page's own row lists no children of its own: no expander there.
    expander = page.find_element(By.CSS_SELECTOR, "#detail-row .expander")
    assert not expander.is_displayed() or expander.text == ""
    assert expander.get_attribute("aria-expanded") is None
    assert console_errors(page) == []


def test_a_finished_indeterminate_task_shows_its_outcome_not_an_empty_track(page, headwayd):
    register(headwayd, id="sweep", name="Sweep caches")
    open_dashboard(page, headwayd)
    found = poll(lambda: row(page, "sweep"), 5, "the row")
    assert httpx.post(f"{headwayd}/v1/tasks/sweep/finish", json={"outcome": "succeeded"}).status_code == 200
    poll(lambda: "finished" in found.get_attribute("class"), 5, "finished")
    assert not found.find_element(By.CSS_SELECTOR, ".activity").is_displayed()
    assert found.find_element(By.CSS_SELECTOR, ".facts .percent").text == "Succeeded"
    assert console_errors(page) == []


def test_korean_names_come_first_and_stalled_is_not_paused(page, headwayd):
    register(headwayd, id="k", name="사진 백업", total=10)
    register(headwayd, id="q", name="로그 정리", stall_timeout_seconds=1)
    open_dashboard(page, headwayd, "min_duration=0&lang=ko")
    cancel = poll(lambda: row(page, "k"), 5, "the row").find_element(By.CSS_SELECTOR, ".cancel")
    assert cancel.get_attribute("aria-label") == "사진 백업 취소"
    badge = poll(lambda: row(page, "q"), 5, "the row").find_element(By.CSS_SELECTOR, ".badge")
    poll(lambda: badge.text == "정체", 10, "정체")
    assert page.find_element(By.CSS_SELECTOR, '[data-filter="stalled"] [data-i18n]').text == "정체"
    assert "멈춤" not in page.find_element(By.TAG_NAME, "body").text
    js(page, "localStorage.clear()")
    assert console_errors(page) == []


def test_screenshots_of_why_attention_output_and_offline(page, tmp_path):
    """A failed row with its message, a parent needing attention, the output tail, Korean
    at desktop and phone width, and the page offline."""
    folder = screenshot_folder(tmp_path)
    desktop = {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}
    port = free_port()
    with daemon_on(tmp_path, port) as base:
        register(base, id="import", name="Import customers", total=500, unit="rows")
        progress(base, "import", completed=120, output=["reading customers.csv", "row 120 ok"])
        assert httpx.post(f"{base}/v1/tasks/import/finish",
                          json={"outcome": "failed", "message": "CSV row 121: bad date “31/02/2026”"}).status_code == 200
        register(base, id="nightly", name="Nightly jobs")
        register(base, id="nightly.export", name="Export", parent_id="nightly", total=10)
        register(base, id="nightly.index", name="Reindex", parent_id="nightly", total=10, stall_timeout_seconds=1)
        register(base, id="nightly.mail", name="Send digests", parent_id="nightly", total=10, stall_timeout_seconds=600)
        for child in ["nightly.export", "nightly.index", "nightly.mail"]:
            progress(base, child, completed=4)
        assert httpx.post(f"{base}/v1/tasks/nightly.export/finish", json={"outcome": "failed", "message": "disk full"}).status_code == 200
        register(base, id="build", name="Build release 2.5", total=40, unit="steps", stall_timeout_seconds=600)
        progress(base, "build", completed=17, output=[f"[{n:02d}/40] compiling module_{n}.swift" for n in range(1, 18)])
        register(base, id="sweep", name="Sweep caches")
        assert httpx.post(f"{base}/v1/tasks/sweep/finish", json={"outcome": "succeeded"}).status_code == 200
        register(base, id="scan", name="Scan archive", label="Reading volume 3", stall_timeout_seconds=600)
        time.sleep(1.5)  # the index child goes silent (its stall timeout is 1 s)
        page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", desktop)
        open_dashboard(page, base, "min_duration=0&lang=en")
        page.find_element(By.CSS_SELECTOR, '[data-filter="all"]').click()
        poll(lambda: row(page, "import") and row(page, "nightly") and row(page, "sweep"), 5, "the rows")
        time.sleep(0.6)  # the bars' transition
        page.save_screenshot(str(folder / "list.png"))
        failed = row(page, "import")
        js(page, "arguments[0].scrollIntoView({block: 'center'})", failed)
        failed.screenshot(str(folder / "failed-row.png"))
        parent = row(page, "nightly")
        js(page, "arguments[0].scrollIntoView({block: 'center'})", parent)
        parent.screenshot(str(folder / "parent-attention.png"))
        page.get(f"{base}/?min_duration=0&lang=en#task=build")
        poll(lambda: page.find_element(By.ID, "output").is_displayed(), 5, "the output tail")
        js(page, "document.getElementById('detail-heading').scrollIntoView({block: 'start'})")
        time.sleep(0.3)
        page.save_screenshot(str(folder / "output-tail.png"))
        page.get(f"{base}/?min_duration=0&lang=ko")
        page.find_element(By.CSS_SELECTOR, '[data-filter="all"]').click()
        poll(lambda: row(page, "nightly") and row(page, "import"), 5, "the rows in Korean")
        time.sleep(0.6)
        page.save_screenshot(str(folder / "korean.png"))
        page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
        time.sleep(0.3)
        page.save_screenshot(str(folder / "korean-phone.png"))
        page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", desktop)
        page.get(f"{base}/?min_duration=0&lang=en")
        poll(lambda: row(page, "scan") and row(page, "build"), 5, "the running rows")
    connection = page.find_element(By.ID, "connection")
    poll(lambda: connection.text.startswith("Offline since"), 20, "offline")
    time.sleep(0.3)
    page.save_screenshot(str(folder / "offline.png"))
    page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    time.sleep(0.3)
    page.save_screenshot(str(folder / "offline-dark.png"))
    page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
    page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    js(page, "localStorage.clear()")
    for name in ["list", "failed-row", "parent-attention", "output-tail", "korean", "korean-phone", "offline"]:
        assert (folder / f"{name}.png").stat().st_size > 1000


def test_one_point_is_one_point(page, headwayd):
    register(headwayd, id="fresh", name="Fresh", total=10)
    page.get(f"{headwayd}/?min_duration=0&lang=en#task=fresh")
    caption = page.find_element(By.ID, "chart-caption")
    poll(lambda: caption.text.endswith("1 point"), 5, "1 point, not 1 points")


COUNT_WATCH = """
    window.countMismatches = [];
    window.countChecks = 0;
    const check = () => {
      const count = document.querySelector('[data-filter][aria-pressed="true"] .count').textContent;
      if (count === '') return;
      window.countChecks += 1;
      // The rows the tab lists: unfinished rows (a finished one lingers in Running, dimmed),
      // and new tasks held above the list.
      const rows = document.querySelectorAll('#tasks > li.task:not(.finished)').length;
      const cue = document.getElementById('new-tasks');
      const held = cue.hidden ? 0 : parseInt(cue.textContent, 10);
      if (Number(count) !== rows + held) window.countMismatches.push([count, rows, held]);
    };
    new MutationObserver(check).observe(document.getElementById('list-view'),
      {subtree: true, childList: true, characterData: true, attributes: true});"""


@pytest.mark.parametrize("min_duration", ["0", "1"])
def test_the_pressed_tab_counts_its_rows_whenever_the_list_is_drawn(page, headwayd, min_duration):
    register(headwayd, id="c0", name="Count 0", total=10)
    open_dashboard(page, headwayd, f"min_duration={min_duration}&lang=en")
    count = lambda: page.find_element(By.CSS_SELECTOR, '[data-filter="running"] .count').text
    poll(lambda: row(page, "c0") and count() == "1", 5, "the first row and its count")
    js(page, COUNT_WATCH)
    # Rows come from the stream (held back min_duration seconds), one leaves dimmed: the
    # count changes in the same frame as the rows, never a frame later.
    for number in range(1, 4):
        register(headwayd, id=f"c{number}", name=f"Count {number}", total=10)
        poll(lambda: row(page, f"c{number}") and count() == str(number + 1), 5, f"row c{number} and its count")
    summaries = "return performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/tasks/summary')).length"
    before = js(page, summaries)
    assert httpx.post(f"{headwayd}/v1/tasks/c2/finish", json={"outcome": "failed"}).status_code == 200
    poll(lambda: "finished" in row(page, "c2").get_attribute("class") and count() == "3", 5, "c2 dimmed, counted out")
    # The counts read after that change arrive too, and are drawn.
    poll(lambda: js(page, summaries) >= before + 2, 6, "the counts read again")
    page.execute_async_script("const done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(done));")
    assert js(page, "return window.countChecks") > 0
    assert js(page, "return window.countMismatches") == []
    assert count() == "3"
    assert console_errors(page) == []


PRESSED_TAB_CONTRAST = """
    const rgb = (text) => text.match(/[\\d.]+/g).slice(0, 4).map(Number);
    const lum = ([r, g, b]) => {
      const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const ratio = (x, y) => { const [a, b] = [lum(x), lum(y)].sort((p, q) => q - p); return (a + 0.05) / (b + 0.05); };
    const button = arguments[0];
    let behind = null;
    for (let n = button.parentElement; n && !behind; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor);
      if (c.length < 4 || c[3] > 0) behind = c;
    }
    return ratio(rgb(getComputedStyle(button).backgroundColor), behind ?? [255, 255, 255]);"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_pressed_tab_stands_out_and_its_text_reads(page, headwayd, scheme):
    register(headwayd, id="one", name="One", total=10)
    page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
    open_dashboard(page, headwayd)
    pressed = page.find_element(By.CSS_SELECTOR, '[data-filter][aria-pressed="true"]')
    poll(lambda: pressed.find_element(By.CSS_SELECTOR, ".count").text == "1", 5, "the count")
    # WCAG: the pressed state (a non-text indicator) 3:1 against what is behind the tab,
    # its label and count 4.5:1 against the tab, with the count's opacity applied.
    assert js(page, PRESSED_TAB_CONTRAST, pressed) >= 3
    for part in ["[data-i18n]", ".count"]:
        assert contrast(page, pressed.find_element(By.CSS_SELECTOR, part)) >= 4.5, part
    assert console_errors(page) == []
