"""The dashboard in a real browser (Playwright and Debian's chromium) against ``gradacc serve``
with API keys on: the key banner clears once a valid key is entered; the list shows name, model,
dataset, backend and b x K; a classifier's page draws its confusion matrix and answers in the
"Try it" box; a chat model's page lists its samples, newest evaluation first; a DPO job's page
plots its reward accuracy and rewards; a GRPO job's page plots its reward per window and per
evaluation (a finished job and its records written straight to the database: the page is under
test, not the training); every chart's y labels are distinct; the chat model's
page chats through its streamed chat pane. A screenshot of each page is kept
(``GRADACC_TEST_ARTIFACTS``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.jobs.records import record_step_metrics
from gradacc.settings import Settings
from gradacc.tables import JobStatus
from tests.api.test_grpo_jobs import grpo_job
from tests.e2e.conftest import embedded_serve
from tests.e2e.test_dashboard import ARTIFACTS, CHROMIUM, browser_missing
from tests.support import make_job, wait_final, wait_until
from trainer_core.spec.job import JobSpec
from worker.predict.failpoints import SERVE_HOLD

pytestmark = pytest.mark.integration
Stack = tuple[str, str, dict[str, str], Path]  # URL, API key, job ids by name, the stream gate
COMMON = {"num_train_epochs": 3, "max_train_samples": 96, "max_eval_samples": 24,
          "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2,
          "learning_rate": 5e-3}  # fmt: skip
JOBS: dict[str, dict[str, Any]] = {
    "dash-classifier": {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"},
    "dash-chat": {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic",
                  "task": "causal-lm", "metadata": {"team": "chat"}},
    "dash-dpo": {"model": "builtin:tiny-chat", "dataset": "builtin:preference-arithmetic",
                 "task": "causal-lm", "method": "dpo", "logging_steps": 2},
}  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("dash")
    gate = folder / "hold"  # while it exists, a chat stream parks at each token (SERVE_HOLD)
    env = {"GRADACC_REQUIRE_AUTH": "true", SERVE_HOLD: str(gate)}
    with embedded_serve(folder, env=env) as (url, _):
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
        yield url, key, ids, gate


# Four windows' rewards and two evaluations': 6 reward points, 4 completion lengths.
GRPO_STEPS = [{"step": s, "reward_mean": r, "completion_length": 7.0 + s, "train_loss": 0.01}
              for s, r in ((1, 0.125), (2, 0.25), (3, 0.3125), (4, 0.5))]  # fmt: skip
GRPO_STEPS[1] |= {"eval_reward_mean": 0.2}
GRPO_STEPS[3] |= {"eval_reward_mean": 0.45}


def _grpo_job_with_rewards(home: Path) -> str:
    """A finished GRPO job written straight to the database (no worker ever sees it), with
    GRPO_STEPS as its step records."""
    spec = JobSpec.model_validate(grpo_job("file-0123456789abcdef0123")).model_dump(mode="json")
    settings = Settings(home=home)
    job_id = make_job(settings, tenant="ana", name="dash-grpo", spec=spec,
                      status=JobStatus.SUCCEEDED)  # fmt: skip
    with session_scope(settings) as session:
        record_step_metrics(session, job_id=job_id, records=GRPO_STEPS)
        session.commit()
    return job_id


def _distinct_ticks(page: Any, chart: str) -> list[str]:
    labels: list[str] = json.loads(page.locator(chart).get_attribute("data-y-ticks") or "[]")
    assert len(labels) >= 2, chart
    assert len(set(labels)) == len(labels), (chart, labels)
    return labels


def test_the_dashboard_pages(stack: Stack) -> None:
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        browser_missing("Playwright's Python package is not installed")
    if not Path(CHROMIUM).exists():
        browser_missing("chromium is not installed")
    url, key, ids, gate = stack
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

        grpo = _grpo_job_with_rewards(gate.parent / "home")
        page.goto(f"{url}/#/jobs/{grpo}")
        expect(page.locator("#rewards-caption")).to_have_text("reward (window mean, eval mean)")
        expect(page.locator("#rewards-figure")).to_be_visible()
        expect(page.locator("#chart-rewards")).to_have_attribute("data-points", "6")
        expect(page.locator("#chart-quality")).to_have_attribute("data-points", "4")
        _distinct_ticks(page, "#chart-rewards")
        page.screenshot(path=str(ARTIFACTS / "dashboard-grpo.png"), full_page=True)

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


def _greedy(client: httpx.Client, model: str, messages: list[dict[str, str]]) -> str | None:
    """The non-streamed greedy answer through the API; None while no predict server answers."""
    body = {"model": model, "messages": messages, "max_completion_tokens": 24, "temperature": 0}
    reply = client.post("/v1/chat/completions", json=body)
    if reply.status_code == 503:  # the predict server listens once torch is imported
        return None
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def _pieces(client: httpx.Client, model: str, messages: list[dict[str, str]]) -> list[str]:
    """The text pieces of the same request streamed through the API (empty deltas left out)."""
    body = {"model": model, "messages": messages, "max_completion_tokens": 24, "temperature": 0,
            "stream": True}  # fmt: skip
    pieces = []
    with client.stream("POST", "/v1/chat/completions", json=body) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                pieces += [delta["content"]] if delta.get("content") else []
    return pieces


def test_the_chat_pane(stack: Stack) -> None:
    """A chat model's page streams each answer into its chat pane, piece by piece, equal to the
    API's greedy answer to the same conversation (the first turn sent back with the second);
    Stop ends a held stream; an OpenAI error body's message is shown; a checkpoint picked
    answers as itself; a classifier's page has no chat."""
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        browser_missing("Playwright's Python package is not installed")
    if not Path(CHROMIUM).exists():
        browser_missing("chromium is not installed")
    url, key, ids, gate = stack
    api = httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {key}"})
    with api, sync_playwright() as p:
        job = api.get(f"/v1/jobs/{ids['dash-chat']}").json()
        checkpoints = api.get(f"/v1/jobs/{job['id']}/checkpoints").json()["data"]
        first = [{"role": "user", "content": "what is 2 plus 3?"}]
        model = job["fine_tuned_model"]
        answer = wait_until(lambda: _greedy(api, model, first), timeout=60, what="an answer")
        second = [*first, {"role": "assistant", "content": answer},
                  {"role": "user", "content": "and 4 plus 4?"}]  # fmt: skip
        answer_2 = _greedy(api, model, second)
        assert answer and answer_2
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.add_init_script(f"sessionStorage.setItem('gradacc_api_key', {json.dumps(key)})")
        page.goto(f"{url}/#/jobs/{job['id']}")
        expect(page.locator("#chat-pane")).to_be_visible()
        expect(page.locator("#chat-model option")).to_have_count(1 + len(checkpoints))
        page.fill("#chat-max-tokens", "24")
        answers = page.locator("#chat-log li[data-role=assistant]")
        for turn, (messages, expected) in enumerate([(first, answer), (second, answer_2)]):
            page.fill("#chat-form textarea", messages[-1]["content"])
            with page.expect_request("**/v1/chat/completions") as sent:
                page.click("#chat-send")
            body = json.loads(sent.value.post_data or "{}")
            assert body["messages"] == messages  # the whole conversation, each turn
            assert body["stream"] is True and body["temperature"] == 0
            expect(answers.nth(turn)).to_have_attribute("data-state", "done", timeout=30_000)
            assert answers.nth(turn).text_content() == expected
        # Drawn piece by piece, as the stream sends them (one per token here).
        pieces = _pieces(api, model, first)
        assert "".join(pieces) == answer and len(pieces) >= 2
        assert answers.nth(0).get_attribute("data-chunks") == str(len(pieces))
        page.locator("#chat-section").screenshot(path=str(ARTIFACTS / "dashboard-chat-pane.png"))

        gate.touch()  # the next stream parks after its first token until Stop closes it
        try:
            page.fill("#chat-form textarea", "what is 1 plus 1?")
            page.click("#chat-send")
            expect(answers.nth(2)).not_to_have_attribute("data-chunks", "0", timeout=30_000)
            page.click("#chat-stop")
            expect(answers.nth(2)).to_have_attribute("data-state", "stopped")
            expect(page.locator("#chat-send")).to_be_enabled()
        finally:
            gate.unlink()
        page.fill("#chat-max-tokens", "100000")  # above the server's limit: a 400 naming it
        page.fill("#chat-form textarea", "what is 3 plus 3?")
        page.click("#chat-send")
        expect(page.locator("#chat-error")).to_contain_text("max_completion_tokens")
        expect(answers).to_have_count(3)  # the failed turn is not kept: its text is back
        expect(page.locator("#chat-form textarea")).to_have_value("what is 3 plus 3?")

        page.fill("#chat-max-tokens", "24")
        page.click("#chat-clear")  # a new conversation, with a checkpoint as the model
        checkpoint = page.locator("#chat-model option").nth(1).get_attribute("value") or ""
        assert checkpoint.endswith(f":ckpt-step-{checkpoints[0]['step_number']}")
        page.select_option("#chat-model", checkpoint)
        page.fill("#chat-form textarea", first[0]["content"])
        page.click("#chat-send")
        expect(answers).to_have_count(1)
        expect(answers.first).to_have_attribute("data-state", "done", timeout=30_000)
        assert answers.first.text_content() == _greedy(api, checkpoint, first)

        page.goto(f"{url}/#/jobs/{ids['dash-classifier']}")
        expect(page.locator("#chat-note")).to_contain_text("classifier")
        expect(page.locator("#chat-pane")).to_be_hidden()
        browser.close()
    assert errors == []
