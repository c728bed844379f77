"""The dashboard in a real headless browser (Debian's chromium and chromedriver, driven by
selenium) on SeaweedFS: the queues and their counts, a refresh that shows a new message, a dead
letter redriven by a click (checked in the bucket), and a screenshot kept as an artefact.

`make test` installs the browser first (`make browser`); without it this test is skipped,
except under CI, where a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.local.console import Connection
from s3queue.local.seaweed import EmbeddedS3
from s3queue.local.ui.serve import in_background
from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage

pytestmark = [pytest.mark.s3, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 20  # seconds an explicit wait allows a DOM condition


@pytest.fixture
def browser() -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromedriver are missing: make browser installs them")
        pytest.skip("no chromium/chromedriver here: run make browser (as root) first")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1280,860")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def seeded(shared_s3_client: Any, bucket: str) -> Harness:
    """Queues on SeaweedFS: ``jobs`` with dead letters and waiting messages, ``mail`` busy."""
    storage = S3Storage(shared_s3_client, bucket, sleep=lambda _: None)
    # The drain needs no time to pass (no retries), so the fake clock stays at the real time
    # the dashboard reads with.
    clock = FakeClock(int(time.time() * 1000))
    h = Harness(storage=storage, clock=clock, settings=QueueSettings(max_retries=0))
    for name in ("bad-1", "bad-2", "bad-3"):
        h.queue.enqueue({"report": name, "values": "not a list"}, id=name)
    h.drain(Recorder(fail=lambda m: ValueError(f"values must be a list: {m.body['report']}")))
    h.queue.enqueue({"report": "weekly", "values": [1, 2, 3]}, attributes={"tenant": "acme"})
    h.queue.enqueue({"report": "monthly", "values": [4]}, partition="tenant-7")
    emails = Queue("send_email", storage=storage)
    for n in range(5):
        emails.enqueue({"to": f"user{n}@example.com"}, delay=600 if n % 2 else 0)
    return h


def test_redrive_a_dead_letter_by_clicking(
    browser: Any,
    seeded: Harness,
    seaweed: EmbeddedS3,
    shared_s3_client: Any,
    bucket: str,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    conn = Connection.checked(shared_s3_client, bucket, "s3queue")
    wait = WebDriverWait(browser, WAIT)
    with in_background(conn, seaweed.endpoint_url, "127.0.0.1", 0) as url:
        # GIVEN the overview: every queue with its counts
        browser.get(url)
        row = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, 'tr[data-queue="jobs"]')))
        assert row.find_element(By.CSS_SELECTOR, "td.dead").text == "3"
        assert row.find_element(By.CSS_SELECTOR, "td.pending").text == "2"
        emails = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="send_email"]')
        assert emails.find_element(By.CSS_SELECTOR, "td.delayed").text == "2"
        # WHEN a message arrives, the page refreshes itself
        seeded.queue.enqueue({"report": "daily", "values": [5]})
        pending = '[data-queue="jobs"] td.pending'
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, pending), "3"))
        browser.save_screenshot(str(tmp_path / "overview.png"))
        # WHEN the operator opens the queue and clicks Redrive on one dead letter
        browser.find_element(By.LINK_TEXT, "jobs").click()
        button = '[data-id="bad-2"] button.redrive'
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, button))).click()
        # THEN the page says so, and the dead letter is a pending message again in the bucket
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".flash"), "bad-2"))
        assert not browser.find_elements(By.CSS_SELECTOR, '[data-id="bad-2"]')
        assert [d["id"] for d in seeded.queue.dead_letters()] == ["bad-1", "bad-3"]
        jobs = Queue("jobs", storage=seeded.storage)  # the real clock, as the dashboard's
        waiting = [m for m in jobs.peek(10) if m["body"].get("report") == "bad-2"]
        assert [m["state"] for m in waiting] == ["pending"]
        # and a dead letter shows its traceback
        browser.find_element(By.LINK_TEXT, "bad-1").click()
        trace = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "pre.traceback")))
        assert "values must be a list: bad-1" in trace.text
        browser.back()
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, '[data-id="bad-1"]')))
        shot = tmp_path / "dashboard.png"
        browser.save_screenshot(str(shot))
        browser.get("about:blank")  # no refresh in flight while the server stops
    assert shot.stat().st_size > 10_000
    keep = os.environ.get("S3QUEUE_DASHBOARD_PNG")  # e.g. docs/dashboard.png, for the README
    if keep:
        shutil.copyfile(shot, keep)
