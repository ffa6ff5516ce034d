"""The dashboard's job page controls a chat job, in a real browser (Playwright and Debian's
chromium) against ``gradacc serve``: the form starts from a chat model and a chat dataset; the
job, held at step 2 by the hold failpoint (so it is still running when paused, whatever the
machine's speed), is paused from its page, lists the pause's checkpoint, is resumed and
succeeds, with the model it made shown. A screenshot is kept (``GRADACC_TEST_ARTIFACTS``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import embedded_serve
from tests.e2e.test_dashboard import ARTIFACTS, CHROMIUM, browser_missing
from tests.support import Hold

pytestmark = pytest.mark.integration
HOLD_STEP = 2


def test_pause_resume_and_checkpoints_of_a_chat_job(tmp_path: Path) -> None:
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        browser_missing("Playwright's Python package is not installed")
    if not Path(CHROMIUM).exists():
        browser_missing("chromium is not installed")
    hold = Hold(tmp_path / "hold", HOLD_STEP)
    with embedded_serve(tmp_path, env=hold.env()) as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url + "/")
        expect(page.locator("#submit-form input[name=model]")).to_have_value("builtin:tiny-chat")
        expect(page.locator("#submit-form input[name=dataset]")).to_have_value(
            "builtin:chat-arithmetic"
        )
        page.fill("#submit-form input[name=name]", "dash-pause")
        page.fill("#submit-form input[name=max_train_samples]", "128")  # b 8, K 4: 4 steps
        page.click("#submit-form button[type=submit]")
        page.wait_for_url("**/#/jobs/job_*", timeout=10_000)
        status = page.locator("#job-status")
        hold.held()
        expect(status).to_have_attribute("data-status", "running", timeout=60_000)
        expect(page.locator("#job-details")).to_contain_text("name dash-pause")
        expect(page.locator("#resume")).to_be_disabled()
        page.click("#pause")
        expect(status).to_have_attribute("data-status", "paused")
        expect(page.locator("#events")).to_contain_text(f"paused at step {HOLD_STEP}",
                                                        timeout=120_000)  # fmt: skip
        checkpoint = page.locator(f"#checkpoints tbody tr[data-step='{HOLD_STEP}']")
        expect(checkpoint).to_have_count(1)
        expect(checkpoint).to_contain_text(f"ft:builtin:tiny-chat:default::{job_id(page)}")
        expect(page.locator("#pause")).to_be_disabled()
        hold.release()
        page.click("#resume")
        expect(status).to_have_attribute("data-status", "succeeded", timeout=240_000)
        details = page.locator("#job-details")
        expect(details).to_contain_text(
            f"fine_tuned_model ft:builtin:tiny-chat:default::{job_id(page)}"
        )
        expect(page.locator("#checkpoints tbody tr").first).not_to_have_attribute(
            "data-step", str(HOLD_STEP)
        )  # the newest first: the end's, past the pause's step
        expect(page.locator("#pause")).to_be_disabled()
        expect(page.locator("#resume")).to_be_disabled()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-controls.png"), full_page=True)
        browser.close()
    assert errors == []


def job_id(page: object) -> str:
    return str(page.url.rsplit("/", 1)[-1])  # type: ignore[attr-defined]
