"""The dashboard in a real browser: Playwright drives Debian's chromium against ``gradacc serve``.
It submits a tiny job through the form, follows it to ``succeeded`` on the job page, and checks
that its loss chart was drawn with points. A job on an uploaded chat file links to the preview
view, which highlights as many tokens per row as the API's preview trains. A screenshot is kept (``GRADACC_TEST_ARTIFACTS``,
default ``var/test-artifacts``). Without chromium or Playwright (``scripts/install_browser.sh``
installs both) the test skips, except under CI=true, where that is a failure."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from tests.api.test_chat_data import GOOD, jsonl
from tests.conftest import ROOT
from tests.support import wait_final

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
        page.fill("#submit-form input[name=max_train_samples]", "256")
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


def test_the_job_page_links_to_what_is_trained(served_url: str) -> None:
    """Row 1 of GOOD is 46 tokens: at max_seq_length 44 its last trained token is cut (a
    warning). The view asks the API with the job's fields and highlights, per row, as many
    tokens as the API's answer trains. The job is cancelled at once: its page is under test."""
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        browser_missing("Playwright's Python package is not installed")
    if not Path(CHROMIUM).exists():
        browser_missing("chromium is not installed")
    with httpx.Client(base_url=served_url, timeout=60) as api:
        file = api.post("/v1/files", files={"file": ("chat.jsonl", jsonl(GOOD))}).json()["id"]
        job = api.post("/v1/jobs", json={"model": "builtin:tiny-chat", "task": "causal-lm",
                                         "dataset": file, "max_seq_length": 44}).json()  # fmt: skip
        api.post(f"/v1/jobs/{job['id']}/cancel")
        assert wait_final(api, job["id"], timeout=60)["status"] == "cancelled"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{served_url}/#/jobs/{job['id']}")
        with page.expect_response(f"**/v1/files/{file}/preview", timeout=60_000) as answer:
            page.click("#preview-link")
        assert answer.value.status == 200
        sent = answer.value.request.post_data_json or {}
        assert sent["model"] == "builtin:tiny-chat" and sent["max_seq_length"] == 44
        expected = answer.value.json()["rows"]
        assert len(expected) == len(GOOD) and expected[0]["warnings"]
        rows = page.locator("#preview-rows > li")
        expect(rows).to_have_count(len(expected))
        for i, row in enumerate(expected):
            assert rows.nth(i).locator(".tok.trained").count() == row["trained"] > 0
            assert rows.nth(i).locator(".tok").count() == row["total"]
            expect(rows.nth(i).locator(".preview-warnings li")).to_have_text(row["warnings"])
        assert "\N{DOWNWARDS ARROW WITH CORNER LEFTWARDS}" in rows.nth(1).inner_text()
        # A job that has ended waits for nothing (it said "waiting for the first evaluation").
        assert "no evaluation ran" in (
            page.locator("#chart-eval").get_attribute("data-empty") or ""
        )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-preview.png"), full_page=True)
        browser.close()
    assert errors == []
