"""The dashboard in a real browser: Playwright drives Debian's chromium against ``gradacc serve``.
It submits a tiny job through the form, follows it to ``succeeded`` on the job page, and checks
that its loss chart was drawn with points. A screenshot is kept (``GRADACC_TEST_ARTIFACTS``,
default ``var/test-artifacts``). Without chromium or Playwright (``scripts/install_browser.sh``
installs both) the test skips, except under CI=true, where that is a failure."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("GRADACC_TEST_ARTIFACTS", ROOT / "var" / "test-artifacts"))


def browser_missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; run scripts/install_browser.sh (required under CI=true)")
    pytest.skip(f"{reason}; run scripts/install_browser.sh")


def test_submit_through_the_form_and_watch_the_chart(served_url: str) -> None:
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        browser_missing("Playwright's Python package is not installed")
    if not Path(CHROMIUM).exists():
        browser_missing("chromium is not installed")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(served_url + "/")
        expect(page.locator("#submit-form")).to_be_visible()
        page.fill("input[name=max_train_samples]", "256")
        page.select_option("select[name=backend]", "accelerate")
        page.click("#submit-form button[type=submit]")
        page.wait_for_url("**/#/jobs/job_*", timeout=10_000)
        status = page.locator("#job-status")
        expect(status).to_have_attribute("data-status", "succeeded", timeout=120_000)
        chart = page.locator("#chart-loss")
        expect(chart).not_to_have_attribute("data-points", "0")
        assert int(chart.get_attribute("data-points") or 0) >= 8  # 256 rows, b 8 K 4: 8 steps
        assert page.locator("#chart-loss canvas").count() == 1
        assert "succeeded" in page.locator("#events").inner_text()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-job.png"), full_page=True)
        page.goto(served_url + "/")
        expect(page.locator("#jobs tbody tr").first).to_contain_text("succeeded")
        page.screenshot(path=str(ARTIFACTS / "dashboard-list.png"))
        browser.close()
    assert errors == []
