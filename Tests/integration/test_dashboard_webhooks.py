"""The dashboard's webhook page (issue 49 item 5) in a real headless Chromium against a live
headwayd and a real receiver on loopback: only an admin token sees it; a webhook is made
with its format's fields, sent a test whose outcome and delivery show, and deleted after a
confirmation; the form says what is wrong field by field; the keyboard alone does it all;
English and Korean, desktop and phone width, light and dark.

Screenshots go to a temporary folder, or to $HEADWAY_SCREENSHOTS when set
(`HEADWAY_SCREENSHOTS=docs/screenshots` refreshes those of docs/dashboard.md)."""
import json

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select

from conftest import run_headwayd
from test_dashboard import browser, console_errors, contrast, js, make_token, page, poll, screenshot_folder  # noqa: F401
from test_webhooks import FAST_RETRIES, receiving, verify_signature


def open_page(driver, base, lang="en", token=None):
    driver.get(f"{base}/?min_duration=0&lang={lang}")
    if token:
        poll(lambda: driver.find_element(By.ID, "token-view").is_displayed(), 5, "the token form")
        driver.find_element(By.ID, "token-input").send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "#token-form button").click()
    poll(lambda: driver.find_element(By.ID, "connection").get_attribute("data-state") == "live", 10, "Live")


def card(driver, url):
    """The card of the webhook to `url`, or None."""
    return js(driver, """return [...document.querySelectorAll("#hooks > li.hook")]
        .find((item) => item.querySelector(".hook-url").textContent === arguments[0]) ?? null""", url)


def test_only_an_admin_token_sees_the_webhook_page(page, tmp_path):
    tmp_path.mkdir(exist_ok=True)
    admin, reader = make_token(tmp_path, "admin"), make_token(tmp_path, "read")
    with run_headwayd(tmp_path) as base:
        open_page(page, base, token=reader)
        link = page.find_element(By.ID, "hooks-link")
        assert not link.is_displayed()
        page.get(f"{base}/?min_duration=0&lang=en#webhooks")
        poll(lambda: page.find_element(By.ID, "list-view").is_displayed(), 5, "the list, not the webhook page")
        assert not page.find_element(By.ID, "webhooks-view").is_displayed()
        js(page, "sessionStorage.clear()")
        open_page(page, base, token=admin)
        link = page.find_element(By.ID, "hooks-link")
        poll(lambda: link.is_displayed(), 5, "the link for an admin")
        link.click()
        view = page.find_element(By.ID, "webhooks-view")
        poll(lambda: view.is_displayed(), 5, "the webhook page")
        poll(lambda: page.find_element(By.ID, "hooks-empty").is_displayed(), 5, "no webhooks yet")
        assert page.switch_to.active_element == page.find_element(By.ID, "hooks-heading")
        # Back to the tasks with Escape, the focus on the link again.
        page.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
        poll(lambda: page.find_element(By.ID, "list-view").is_displayed(), 5, "back to the list")
        js(page, "sessionStorage.clear()")
        assert [e for e in console_errors(page) if "401" not in e["message"] and "403" not in e["message"]] == []


def test_make_test_see_the_delivery_and_delete(page, tmp_path):
    folder = screenshot_folder(tmp_path)
    desktop = {"width": 1280, "height": 1100, "deviceScaleFactor": 1, "mobile": False}
    with receiving() as receiver, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", desktop)
        open_page(page, base)
        page.find_element(By.ID, "hooks-link").click()
        poll(lambda: page.find_element(By.ID, "hooks-empty").is_displayed(), 5, "no webhooks yet")
        # An empty form: each field says what it needs, the focus on the first.
        page.find_element(By.ID, "hook-create").click()
        assert page.find_element(By.ID, "hook-url-error").text == "Enter the address events are posted to."
        assert page.find_element(By.ID, "hook-events-error").text == "Choose at least one event."
        assert page.find_element(By.ID, "hook-form-error").text == "Check the fields marked below."
        assert page.switch_to.active_element == page.find_element(By.ID, "hook-url")
        assert page.find_element(By.ID, "hook-url").get_attribute("aria-invalid") == "true"
        # The format's own fields show with their format.
        format = Select(page.find_element(By.ID, "hook-format"))
        format.select_by_value("telegram")
        assert page.find_element(By.ID, "hook-chat-id").is_displayed()
        assert not page.find_element(By.ID, "hook-routing-key").is_displayed()
        format.select_by_value("pagerduty")
        assert page.find_element(By.ID, "hook-routing-key").is_displayed()
        assert not page.find_element(By.ID, "hook-chat-id").is_displayed()
        format.select_by_value("email")
        assert page.find_element(By.ID, "hook-mail-from").is_displayed() and page.find_element(By.ID, "hook-mail-to").is_displayed()
        format.select_by_value("slack")
        assert not any(page.find_element(By.ID, f"hook-{name}").is_displayed()
                       for name in ["chat-id", "routing-key", "mail-from", "mail-to"])
        # The outcomes apply to task.finished only.
        assert not page.find_element(By.CSS_SELECTOR, "#hook-outcomes input").is_enabled()
        page.find_element(By.ID, "hook-url").send_keys(receiver.url)
        page.find_element(By.CSS_SELECTOR, '#hook-events input[value="task.finished"]').click()
        page.find_element(By.CSS_SELECTOR, '#hook-events input[value="task.stalled"]').click()
        assert page.find_element(By.CSS_SELECTOR, "#hook-outcomes input").is_enabled()
        page.find_element(By.CSS_SELECTOR, '#hook-outcomes input[value="failed"]').click()
        page.find_element(By.ID, "hook-create").click()
        secret = page.find_element(By.ID, "hook-secret-text")
        poll(lambda: secret.is_displayed() and secret.text.startswith("whsec_"), 5, "the secret, shown once")
        assert page.find_element(By.ID, "hook-form-error").is_displayed() is False
        made = poll(lambda: card(page, receiver.url), 5, "the webhook's card")
        [listed] = httpx.get(f"{base}/v1/webhooks").json()["webhooks"]
        assert listed["format"] == "slack" and listed["events"] == ["task.finished", "task.stalled"]
        assert listed["outcomes"] == ["failed"]
        assert "task.finished (Failed), task.stalled" in made.find_element(By.CSS_SELECTOR, ".hook-facts").text
        # Send a test: the outcome on the card, the receiver got it signed, the delivery listed.
        made.find_element(By.CSS_SELECTOR, '[data-role="test"]').click()
        outcome = card(page, receiver.url).find_element(By.CSS_SELECTOR, ".hook-outcome")
        poll(lambda: card(page, receiver.url).find_element(By.CSS_SELECTOR, ".hook-outcome").text.startswith(
            "Test: Delivered: HTTP 200 in "), 15, "the test's outcome")
        [request] = receiver.wait_for(1)
        assert verify_signature(request, secret.text)
        assert json.loads(request["body"])["text"].startswith("Headway test delivery failed")
        delivery = poll(lambda: card(page, receiver.url).find_elements(By.CSS_SELECTOR, ".deliveries > li"), 5,
                        "the delivery listed")[0]
        assert "Test" in delivery.text and "task.finished" in delivery.text and "Delivered: HTTP 200" in delivery.text
        outcome = card(page, receiver.url).find_element(By.CSS_SELECTOR, ".hook-outcome")
        assert outcome.get_attribute("role") == "status" and contrast(page, outcome) >= 4.5
        js(page, "window.scrollTo(0, 0)")
        page.save_screenshot(str(folder / "webhooks.png"))
        # A second test at once: said plainly, nothing sent.
        card(page, receiver.url).find_element(By.CSS_SELECTOR, '[data-role="test"]').click()
        poll(lambda: "10 seconds" in card(page, receiver.url).find_element(By.CSS_SELECTOR, ".hook-outcome").text, 5,
             "too soon, said so")
        assert len(receiver.requests) == 1
        # Delete, confirmed: the focus on "Keep it" first; Escape keeps it.
        card(page, receiver.url).find_element(By.CSS_SELECTOR, '[data-role="delete"]').click()
        keep = poll(lambda: page.switch_to.active_element.get_attribute("data-role") == "keep"
                    and page.switch_to.active_element, 5, "the focus on Keep it")
        assert "Nothing more is posted to it" in card(page, receiver.url).find_element(By.CSS_SELECTOR, ".confirm").text
        keep.send_keys(Keys.ESCAPE)
        poll(lambda: not card(page, receiver.url).find_element(By.CSS_SELECTOR, ".confirm").is_displayed(), 5, "kept")
        assert page.switch_to.active_element.get_attribute("data-role") == "delete"
        page.switch_to.active_element.send_keys(Keys.ENTER)
        yes = card(page, receiver.url).find_element(By.CSS_SELECTOR, '[data-role="yes"]')
        poll(yes.is_displayed, 5, "Yes, delete")
        yes.click()
        poll(lambda: card(page, receiver.url) is None, 5, "the card gone")
        assert httpx.get(f"{base}/v1/webhooks").json() == {"webhooks": []}
        assert page.find_element(By.ID, "hooks-empty").is_displayed()
        # The one refusal: the second test, answered 429 on purpose.
        assert [e for e in console_errors(page) if "(Too Many Requests)" not in e["message"]] == []
    page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_korean_phone_dark(page, tmp_path):
    folder = screenshot_folder(tmp_path)
    with receiving(statuses=(500,)) as receiver, run_headwayd(tmp_path, *FAST_RETRIES) as base:
        made = httpx.post(f"{base}/v1/webhooks", json={"url": receiver.url + "?channel=ops-alerts-and-a-long-name",
                                                        "events": ["task.stalled", "task.finished"], "format": "json",
                                                        "task_prefix": "nightly-"})
        assert made.status_code == 201, made.text
        page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                             {"width": 390, "height": 1400, "deviceScaleFactor": 1, "mobile": True})
        page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        try:
            page.get(f"{base}/?min_duration=0&lang=ko#webhooks")
            view = page.find_element(By.ID, "webhooks-view")
            poll(lambda: view.is_displayed() and page.find_elements(By.CSS_SELECTOR, "#hooks > li.hook"), 10, "the page")
            assert page.find_element(By.ID, "hooks-heading").text == "웹훅"
            hook = page.find_element(By.CSS_SELECTOR, "#hooks > li.hook")
            hook.find_element(By.CSS_SELECTOR, '[data-role="test"]').click()
            poll(lambda: page.find_element(By.CSS_SELECTOR, "#hooks .hook-outcome").text.startswith("테스트: 실패: HTTP 500"),
                 15, "the failed test, in Korean")
            poll(lambda: page.find_elements(By.CSS_SELECTOR, "#hooks .deliveries > li"), 5, "the delivery")
            Select(page.find_element(By.ID, "hook-format")).select_by_value("email")
            scroll, client = js(page, "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
            assert scroll <= client, (scroll, client)
            for selector in [".hook-outcome", ".hook-facts", ".hook-url"]:
                assert contrast(page, page.find_element(By.CSS_SELECTOR, f"#hooks {selector}")) >= 4.5, selector
            js(page, "window.scrollTo(0, 0)")
            page.save_screenshot(str(folder / "webhooks-phone-dark-ko.png"))
            assert console_errors(page) == []
        finally:
            page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            page.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                 {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
