"""Run-time flags on the dashboard, in a real headless Chromium against a live headwayd:
an overdue task says so in its own colour (not a stall's), a task that ran late and a
success that came too quickly keep their line once finished, the detail view names the
rules, in English and Korean, on a desktop and at phone width in dark mode.

Screenshots go to a temporary folder, or to $HEADWAY_SCREENSHOTS when set."""
import contextlib
import datetime

import httpx
from selenium.webdriver.common.by import By

from test_dashboard import browser, console_errors, contrast, js, open_dashboard, page, poll, register, row, \
    screenshot_folder  # noqa: F401 (browser and page are fixtures)


def finish(base, task_id, outcome="succeeded"):
    reply = httpx.post(f"{base}/v1/tasks/{task_id}/finish", json={"outcome": outcome})
    assert reply.status_code == 200, reply.text
    return reply.json()


def overdue_ids(base):
    return {task["id"] for task in httpx.get(f"{base}/v1/tasks?overdue=true").json()["tasks"]}


def test_overdue_and_too_quick_in_their_own_colour_and_words(page, headwayd, tmp_path):
    folder = screenshot_folder(tmp_path)
    register(headwayd, id="export", name="Nightly export", label="Writing part 9", expected_seconds=1,
             stall_timeout_seconds=3600)
    register(headwayd, id="report", name="Monthly report", total=40, unit="pages", expected_seconds=1,
             stall_timeout_seconds=3600)
    register(headwayd, id="encode", name="Encode lecture videos", label="Waiting for the encoder",
             stall_timeout_seconds=1)
    register(headwayd, id="copy", name="Copy photos to archive", total=5000, unit="photos", expected_seconds=3600,
             stall_timeout_seconds=3600)
    register(headwayd, id="backup", name="Backup db-4", min_seconds=600, stall_timeout_seconds=3600)
    finish(headwayd, "backup")
    assert httpx.post(f"{headwayd}/v1/tasks/report/progress", json={"completed": 31}).status_code == 200
    assert httpx.post(f"{headwayd}/v1/tasks/copy/progress", json={"completed": 1800}).status_code == 200
    # The daemon's own sweeper flags both a second or so after their start.
    poll(lambda: overdue_ids(headwayd) == {"export", "report"}, 10, "export and report flagged overdue")
    finish(headwayd, "report")

    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                         {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    open_dashboard(page, headwayd)
    export = poll(lambda: row(page, "export"), 5, "the overdue row")
    assert "overdue" in export.get_attribute("class")
    assert export.find_element(By.CSS_SELECTOR, ".badge").text == "Overdue"
    runtime = export.find_element(By.CSS_SELECTOR, ".runtime")
    assert runtime.text.startswith("Overdue by")
    poll(lambda: "stalled" in row(page, "encode").get_attribute("class"), 10, "the stalled row, to compare")
    stall = row(page, "encode").find_element(By.CSS_SELECTOR, ".stall")
    colour = lambda element: js(page, "return getComputedStyle(arguments[0]).color", element)
    assert colour(runtime) != colour(stall), "overdue has its own colour, not a stall's"
    assert colour(export.find_element(By.CSS_SELECTOR, ".badge")) == colour(runtime)
    assert contrast(page, runtime) >= 4.5
    assert "overdue" not in row(page, "copy").get_attribute("class"), "an hour expected: on time"
    # Finished tasks keep their line: late, or too quick.
    report = row(page, "report")
    assert report.find_element(By.CSS_SELECTOR, ".runtime").text.startswith("Ended")
    assert report.find_element(By.CSS_SELECTOR, ".runtime").text.endswith("late")
    assert report.find_element(By.CSS_SELECTOR, ".badge").text == "Succeeded"
    backup = row(page, "backup")
    assert backup.find_element(By.CSS_SELECTOR, ".runtime").text == "Too quick: under 10 min"
    page.save_screenshot(str(folder / "overdue-desktop-en.png"))

    export.find_element(By.CSS_SELECTOR, ".name").click()
    poll(lambda: page.find_element(By.ID, "detail-view").is_displayed(), 5, "the detail view")
    fields = poll(lambda: page.find_element(By.ID, "fields").text, 5, "the fields")
    assert "Run time" in fields and "Overdue by" in fields and "Expected run" in fields
    js(page, "document.getElementById('fields').scrollIntoView({block: 'center'})")
    page.save_screenshot(str(folder / "overdue-detail-en.png"))

    page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                         {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    open_dashboard(page, headwayd, "min_duration=0&lang=en")
    export = poll(lambda: row(page, "export"), 5, "the overdue row at phone width")
    runtime = export.find_element(By.CSS_SELECTOR, ".runtime")
    assert contrast(page, runtime) >= 4.5, "readable in dark mode"
    assert js(page, "return document.documentElement.scrollWidth <= window.innerWidth"), "no sideways scroll"
    js(page, "arguments[0].scrollIntoView({block: 'center'})", export)
    page.save_screenshot(str(folder / "overdue-phone-dark-en.png"))

    open_dashboard(page, headwayd, "min_duration=0&lang=ko")
    export = poll(lambda: row(page, "export"), 5, "the overdue row in Korean")
    assert export.find_element(By.CSS_SELECTOR, ".badge").text == "기한 초과"
    assert export.find_element(By.CSS_SELECTOR, ".runtime").text.endswith("초과")
    assert row(page, "backup").find_element(By.CSS_SELECTOR, ".runtime").text == "너무 빨리 종료: 10분 미만"
    assert row(page, "report").find_element(By.CSS_SELECTOR, ".runtime").text.endswith("늦게 종료")
    js(page, "arguments[0].scrollIntoView({block: 'center'})", export)
    page.save_screenshot(str(folder / "overdue-phone-dark-ko.png"))

    page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                         {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    open_dashboard(page, headwayd, "min_duration=0&lang=ko")
    poll(lambda: row(page, "export"), 5, "the overdue row, desktop Korean")
    page.save_screenshot(str(folder / "overdue-desktop-ko.png"))
    page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert console_errors(page) == []
    for name in ["overdue-desktop-en", "overdue-detail-en", "overdue-phone-dark-en", "overdue-phone-dark-ko",
                 "overdue-desktop-ko"]:
        assert (folder / f"{name}.png").stat().st_size > 1000


def test_an_overdue_event_reaches_an_open_page_live(page, headwayd):
    """The page listens for task.overdue: a row already shown turns overdue without a reload."""
    open_dashboard(page, headwayd)
    register(headwayd, id="slow", name="Slow job", expected_seconds=1, stall_timeout_seconds=3600)
    slow = poll(lambda: row(page, "slow"), 5, "the row")
    assert "overdue" not in slow.get_attribute("class")
    poll(lambda: "overdue" in slow.get_attribute("class"), 10, "the row turned overdue by the event")
    assert slow.find_element(By.CSS_SELECTOR, ".badge").text == "Overdue"
    assert console_errors(page) == []


@contextlib.contextmanager
def pinned_wall_clock(page, milliseconds):
    """The page's wall clock (`Date.now`) stopped at `milliseconds` since the epoch for the
    pages loaded meanwhile: a moment shown exactly, not waited for."""
    script = page.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                  {"source": f"Date.now = () => {int(milliseconds)};"})
    try:
        yield
    finally:
        page.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]})


def epoch_ms(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def test_just_past_the_due_moment_reads_under_one_second_never_zero(page, headwayd, tmp_path):
    """A task overdue for half a second, and one that finished a few milliseconds past its
    deadline, say "under 1 sec" in both languages, not "0 sec"."""
    folder = screenshot_folder(tmp_path)
    due = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=1500)
    deadline = due.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    register(headwayd, id="sync", name="Sync mailboxes", deadline=deadline, stall_timeout_seconds=3600)
    register(headwayd, id="upload", name="Upload invoices", deadline=deadline, stall_timeout_seconds=3600)
    poll(lambda: datetime.datetime.now(datetime.timezone.utc) > due, 5, "the deadline passed")
    finish(headwayd, "upload")
    upload = httpx.get(f"{headwayd}/v1/tasks/upload").json()
    assert upload["overdue"] and epoch_ms(upload["finished_at"]) - epoch_ms(upload["overdue_since"]) < 1000, \
        f"finished within a second of its deadline (a busy machine took longer): {upload}"
    poll(lambda: "sync" in overdue_ids(headwayd), 10, "sync flagged overdue by the sweeper")
    sync = httpx.get(f"{headwayd}/v1/tasks/sync").json()
    with pinned_wall_clock(page, epoch_ms(sync["overdue_since"]) + 500):
        page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                             {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        open_dashboard(page, headwayd)
        runtime = lambda task_id: poll(lambda: row(page, task_id), 5, task_id).find_element(By.CSS_SELECTOR, ".runtime")
        poll(lambda: runtime("sync").text == "Overdue by under 1 sec", 5, f"sync: {runtime('sync').text}")
        assert runtime("upload").text == "Ended under 1 sec late"
        assert row(page, "sync").find_element(By.CSS_SELECTOR, ".badge").text == "Overdue"
        page.save_screenshot(str(folder / "overdue-under-a-second-en.png"))
        open_dashboard(page, headwayd, "min_duration=0&lang=ko")
        poll(lambda: runtime("sync").text == "1초 미만 초과", 5, f"sync in Korean: {runtime('sync').text}")
        assert runtime("upload").text == "1초 미만 늦게 종료"
        page.save_screenshot(str(folder / "overdue-under-a-second-ko.png"))
        page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert console_errors(page) == []
