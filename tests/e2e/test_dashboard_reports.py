"""The dashboard in a real browser (Playwright and Debian's chromium) against ``gradacc serve``
with API keys on: the key banner clears once a valid key is entered; the list shows name, model,
dataset, backend and b x K; a classifier's page draws its confusion matrix and answers in the
"Try it" box; a chat model's page lists its samples, newest evaluation first; a DPO job's page
plots its reward accuracy and rewards; every chart's y labels are distinct. A screenshot of each
page is kept (``GRADACC_TEST_ARTIFACTS``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.settings import Settings
from tests.e2e.conftest import embedded_serve
from tests.e2e.test_dashboard import ARTIFACTS, CHROMIUM, browser_missing
from tests.support import wait_final

pytestmark = pytest.mark.integration
COMMON = {"num_train_epochs": 3, "max_train_samples": 96, "max_eval_samples": 24,
          "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2,
          "learning_rate": 5e-3}  # fmt: skip
JOBS = {
    "dash-classifier": {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"},
    "dash-chat": {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic",
                  "task": "causal-lm", "metadata": {"team": "chat"}},
    "dash-dpo": {"model": "builtin:tiny-chat", "dataset": "builtin:preference-arithmetic",
                 "task": "causal-lm", "method": "dpo", "logging_steps": 2},
}  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("dash")
    with embedded_serve(folder, env={"GRADACC_REQUIRE_AUTH": "true"}) as (url, _):
        with session_scope(Settings(home=folder / "home")) as session:
            key = create_api_key(session, tenant="ana")
        auth = {"Authorization": f"Bearer {key}"}
        ids = {}
        with httpx.Client(base_url=url, headers=auth, timeout=60) as client:
            for name, job in JOBS.items():
                reply = client.post("/v1/jobs", json={**job, **COMMON, "name": name})
                assert reply.status_code == 201, reply.text
                ids[name] = reply.json()["id"]
            for job_id in ids.values():
                assert wait_final(client, job_id, timeout=240)["status"] == "succeeded"
        yield url, key, ids


def _distinct_ticks(page: Any, chart: str) -> list[str]:
    labels = json.loads(page.locator(chart).get_attribute("data-y-ticks") or "[]")
    assert len(labels) >= 2, chart
    assert len(set(labels)) == len(labels), (chart, labels)
    return labels


def test_the_dashboard_pages(stack: tuple[str, str, dict[str, str]]) -> None:
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        browser_missing("Playwright's Python package is not installed")
    if not Path(CHROMIUM).exists():
        browser_missing("chromium is not installed")
    url, key, ids = stack
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url + "/")
        banner = page.locator("#banner")
        expect(banner).to_be_visible()
        expect(banner).to_contain_text("API key is required")
        page.fill("#api-key", key)
        page.click("#key-form button[type=submit]")
        expect(banner).to_be_hidden()
        rows = page.locator("#jobs tbody tr")
        expect(rows).to_have_count(3)
        chat_row = page.locator(f"#jobs tbody tr[data-id={ids['dash-chat']}]")
        for text in (
            "dash-chat",
            "builtin:tiny-chat",
            "builtin:chat-arithmetic",
            "pytorch",
            "8\N{MULTIPLICATION SIGN}2",
        ):
            expect(chat_row).to_contain_text(text)
        expect(chat_row.locator("td.status-succeeded")).to_have_count(1)
        page.fill("#filter-form input[name=metadata]", "team=chat")
        page.click("#filter-form button[type=submit]")
        expect(rows).to_have_count(1)
        page.screenshot(path=str(ARTIFACTS / "dashboard-list.png"))
        expect(banner).to_be_hidden()  # still: the list kept loading with the key

        page.goto(f"{url}/#/jobs/{ids['dash-classifier']}")
        expect(page.locator("#job-status")).to_have_attribute("data-status", "succeeded")
        matrix = page.locator("#confusion table tr")
        expect(matrix).to_have_count(4)  # header, two labels, precision
        cells = page.locator(
            "#confusion table tr:nth-child(2) td, #confusion table tr:nth-child(3) td"
        )
        counts = [int(cells.nth(i).inner_text()) for i in (1, 2, 7, 8)]
        assert sum(counts) == 24  # every eval row of the newest evaluation, once
        for chart in ("#chart-loss", "#chart-eval", "#chart-quality", "#chart-lr"):
            expect(page.locator(chart)).not_to_have_attribute("data-points", "0")
            _distinct_ticks(page, chart)
        page.fill("#try-form textarea", "a wonderful film\nboring and bad")
        page.click("#try-form button[type=submit]")
        expect(page.locator("#try-output .answer")).to_have_count(2, timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "dashboard-classifier.png"), full_page=True)
        expect(page.locator("#rewards-figure")).to_be_hidden()  # no pairs, no rewards chart

        page.goto(f"{url}/#/jobs/{ids['dash-dpo']}")
        expect(page.locator("#job-status")).to_have_attribute("data-status", "succeeded")
        expect(page.locator("#quality-caption")).to_have_text(
            "reward accuracy (train window, eval)"
        )
        expect(page.locator("#rewards-figure")).to_be_visible()
        for chart in ("#chart-quality", "#chart-rewards"):
            expect(page.locator(chart)).not_to_have_attribute("data-points", "0")
            _distinct_ticks(page, chart)
        # 96 pairs / 16 x 3 epochs = 18 steps, a record every 2: 9 windows x 3 reward series.
        expect(page.locator("#chart-rewards")).to_have_attribute("data-points", "27")

        page.goto(f"{url}/#/jobs/{ids['dash-chat']}")
        expect(page.locator("#job-status")).to_have_attribute("data-status", "succeeded")
        # The table is drawn again after each fetch: read it whole, in one call, once the first
        # and the last evaluation's samples (4 rows each, always there) are in.
        page.wait_for_function("document.querySelectorAll('#samples tbody tr').length >= 8")
        cells = page.eval_on_selector_all(
            "#samples tbody tr", "rows => rows.map((r) => [...r.cells].map((c) => c.textContent))"
        )
        steps = [int(row[0]) for row in cells]
        assert steps == sorted(steps, reverse=True) and len(set(steps)) >= 2
        assert "assistant" in cells[0][1]  # the chat prompt, its template included
        assert all(row[2] for row in cells)  # every sample has its reference
        for chart in ("#chart-loss", "#chart-eval", "#chart-quality"):
            _distinct_ticks(page, chart)
        page.fill("#try-form textarea", "what is 2 plus 2?")
        page.click("#try-form button[type=submit]")
        expect(page.locator("#try-output .answer")).to_have_count(1, timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "dashboard-chat.png"), full_page=True)
        browser.close()
    assert errors == []
