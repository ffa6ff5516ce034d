"""Evals and distillation through the official ``openai`` SDK, on a chat test stack that serves a
fine-tuned model and routes ``UPSTREAM`` to a stand-in OpenAI-compatible server (its answer:
``STUB_ANSWER``). Called from tests/e2e/test_chat_completions.py, whose serve and fine-tuning job
they share."""

from __future__ import annotations

import io
import json
from typing import Any

import httpx
import openai
import pytest

from tests.support import wait_until
from tests.upstream_stub import StubUpstream

UPSTREAM, STUB_ANSWER = "old-4o", "4"
TOKENS = 8
SCHEMA = {"type": "object", "properties": {"question": {"type": "string"},
          "answer": {"type": "string"}}, "required": ["question", "answer"]}  # fmt: skip
CONTAINS = {"type": "string_check", "name": "contains", "operation": "like",
            "input": "{{sample.output_text}}", "reference": "{{item.answer}}"}  # fmt: skip
PARITY = {"type": "python", "name": "parity", "pass_threshold": 0.5,
          "source": "def grade(sample, item):\n"
                    "    same = len(sample['output_text']) % 2 == int(item['answer']) % 2\n"
                    "    return 1.0 if same else 0.0\n"}  # fmt: skip
BOTH = {"type": "multi", "name": "both", "calculate_output": "contains * parity",
        "graders": {"contains": CONTAINS, "parity": {k: v for k, v in PARITY.items()
                                                     if k != "pass_threshold"}}}  # fmt: skip
TEMPLATE = {"type": "template", "template": [{"role": "user", "content": "{{item.question}}"}]}


def _items(count: int) -> list[dict[str, str]]:
    return [{"question": f"what is {i % 7} plus {i % 5}?", "answer": str(i % 7 + i % 5)}
            for i in range(count)]  # fmt: skip


def _by_hand(sdk: openai.OpenAI, model: str, items: list[dict[str, str]]) -> dict[str, Any]:
    """Each item's greedy answer from chat completions, graded by ``graders/run``: the counts an
    eval run must report, and the answers."""
    counts = {"passed": 0, "failed": 0, "errored": 0}
    per = {"contains": 0, "parity": 0}
    answers, marks = [], []
    for item in items:
        answer = sdk.chat.completions.create(
            model=model, messages=[{"role": "user", "content": item["question"]}],
            temperature=0, max_completion_tokens=TOKENS)  # fmt: skip
        text = answer.choices[0].message.content or ""
        answers.append(text)
        # Both criteria in one graders/run call: a multi grader reports each sub-grader's score.
        graded = sdk.fine_tuning.alpha.graders.run(grader=BOTH, model_sample=text, item=item)  # type: ignore[arg-type]
        assert not any(graded.metadata.errors.model_dump(exclude_none=True).values())
        scores = graded.sub_rewards
        passed = [scores["contains"] == 1.0, scores["parity"] >= 0.5]
        per["contains"] += passed[0]
        per["parity"] += passed[1]
        counts["passed" if all(passed) else "failed"] += 1
        marks.append(passed)
    return {"counts": counts, "per": per, "answers": answers, "marks": marks}


def _start(
    sdk: openai.OpenAI, eval_id: str, model: str, items: list[dict[str, str]], *, file: bool = False
) -> Any:
    """A run on ``items``, inline or (``file``) from an uploaded ``evals`` file."""
    source: dict[str, Any] = {"type": "file_content", "content": [{"item": i} for i in items]}
    if file:
        data = io.BytesIO("".join(json.dumps({"item": i}) + "\n" for i in items).encode())
        uploaded = sdk.files.create(file=("items.jsonl", data), purpose="evals")  # type: ignore[arg-type]
        source = {"type": "file_id", "id": uploaded.id}
    run = sdk.evals.runs.create(eval_id, name=model, data_source={
        "type": "completions", "model": model, "input_messages": TEMPLATE,
        "sampling_params": {"temperature": 0, "max_completion_tokens": TOKENS},
        "source": source})  # type: ignore[arg-type,misc]  # fmt: skip
    assert run.status in ("queued", "in_progress") and run.result_counts.total == len(items)
    return run


def _ended(sdk: openai.OpenAI, eval_id: str, run_id: str) -> Any:
    return wait_until(
        lambda: (r := sdk.evals.runs.retrieve(run_id, eval_id=eval_id)).status == "completed" and r,
        what=f"eval run {run_id}", timeout=300)  # fmt: skip


def _outputs(sdk: openai.OpenAI, eval_id: str, run_id: str) -> list[Any]:
    return list(sdk.evals.runs.output_items.list(run_id, eval_id=eval_id, limit=20))


def check_evals(
    alice: openai.OpenAI, bob: openai.OpenAI, model: str, stub: StubUpstream
) -> tuple[str, list[str], int]:
    """(the eval, its runs on the fine-tuned model and the base, the items where they differ)."""
    items = _items(50)
    made = alice.evals.create(
        name="arith", data_source_config={"type": "custom", "item_schema": SCHEMA,
                                          "include_sample_schema": True},
        testing_criteria=[CONTAINS, PARITY])  # type: ignore[list-item]  # fmt: skip
    assert made.object == "eval" and [c.name for c in made.testing_criteria] == [
        "contains",
        "parity",
    ]
    runs, hands = [], []
    names = (model, "builtin:tiny-chat")
    started = [_start(alice, made.id, name, items) for name in names]  # graded by hand meanwhile
    for name, run in zip(names, started, strict=True):
        hand = _by_hand(alice, name, items)
        done = _ended(alice, made.id, run.id)
        runs.append(done.id)
        hands.append(hand)
        assert done.result_counts.model_dump() == {"total": 50, **hand["counts"]}, name
        per = {r.testing_criteria: r.passed for r in done.per_testing_criteria_results}
        assert per == hand["per"], name
        outputs = sorted(_outputs(alice, made.id, done.id), key=lambda o: o.datasource_item_id)
        assert [o.sample.output[0].content for o in outputs] == hand["answers"]
        assert [o.datasource_item for o in outputs] == items
        assert done.per_model_usage[0].invocation_count == 50
    asked = len(stub.seen)
    upstream = _ended(alice, made.id, _start(alice, made.id, UPSTREAM, items[:10], file=True).id)
    assert len(stub.seen) == asked + 10  # the stand-in answered each item, once
    assert {o.sample.output[0].content for o in _outputs(alice, made.id, upstream.id)} == {
        STUB_ANSWER
    }
    expected = sum(STUB_ANSWER in i["answer"] and len(STUB_ANSWER) % 2 == int(i["answer"]) % 2
                   for i in items[:10])  # both criteria by hand  # fmt: skip
    assert upstream.result_counts.passed == expected
    assert upstream.result_counts.failed == 10 - expected
    for call in (lambda: bob.evals.retrieve(made.id),
                 lambda: bob.evals.runs.retrieve(upstream.id, eval_id=made.id),
                 lambda: bob.evals.runs.output_items.list(upstream.id, eval_id=made.id),
                 lambda: bob.evals.runs.create(made.id, data_source={"type": "jsonl", "source": {
                     "type": "file_content", "content": [{"item": items[0]}]}})):  # type: ignore[arg-type,misc]  # fmt: skip
        with pytest.raises(openai.NotFoundError):
            call()
    judged = {
        "type": "score_model",
        "name": "judge",
        "model": model,
        "input": [{"role": "user", "content": "x"}],
    }
    with pytest.raises(openai.NotFoundError) as caught:  # alice's model is not bob's to judge with
        bob.evals.create(data_source_config={"type": "custom", "item_schema": SCHEMA},
                         testing_criteria=[judged])  # type: ignore[list-item]  # fmt: skip
    assert caught.value.body["param"] == "testing_criteria[0].model"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as refused:
        alice.evals.runs.create(made.id, data_source={"type": "jsonl", "source": {
            "type": "file_content", "content": [{"item": {"question": 1}}]}})  # type: ignore[arg-type,misc]  # fmt: skip
    assert refused.value.body["param"] == "data_source.source.content"  # type: ignore[index]
    differ = sum(hands[0]["answers"][i] != hands[1]["answers"][i]
                 or hands[0]["marks"][i] != hands[1]["marks"][i] for i in range(len(items)))  # fmt: skip
    return made.id, runs, differ


def check_compare_page(url: str, key: str, eval_id: str, runs: list[str], differ: int) -> None:
    """The evals page in a browser: the two runs side by side show the items where they differ,
    as many as grading by hand found."""
    from playwright.sync_api import expect, sync_playwright

    from tests.e2e.test_dashboard import ARTIFACTS, CHROMIUM

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{url}/evals")
        page.fill("#api-key", key)
        page.click("#key-form button[type=submit]")
        expect(page.locator("#evals tbody tr")).to_have_count(1)
        page.goto(f"{url}/evals?eval={eval_id}&a={runs[0]}&b={runs[1]}")
        expect(page.locator("#differ-count")).to_have_text(f"{differ} of 50 differ")
        assert page.locator("#items tbody tr").count() == differ
        assert page.locator("#criteria tbody tr").count() == 2
        page.uncheck("#differ")
        expect(page.locator("#items tbody tr")).to_have_count(50)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "evals-compare.png"), full_page=True)
        browser.close()
        assert errors == []


def check_distillation(alice: openai.OpenAI, url: str, key: str, stub: StubUpstream) -> None:
    prompts = [{"messages": [{"role": "user", "content": f"say {i}"}]} for i in range(20)]
    data = io.BytesIO("".join(json.dumps(p) + "\n" for p in prompts).encode())
    file_id = alice.files.create(file=("prompts.jsonl", data), purpose="evals").id  # type: ignore[arg-type]
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"{url}/v1", headers=headers, timeout=60) as client:
        asked = len(stub.seen)
        made = client.post("/distillations", json={"teacher": UPSTREAM, "prompt_file": file_id,
                                                   "sampling": {"temperature": 0.7, "seed": 3}})  # fmt: skip
        assert made.status_code == 200, made.text
        done = wait_until(lambda: (d := client.get(f"/distillations/{made.json()['id']}").json())
                          ["status"] == "completed" and d, what="the distillation", timeout=120)  # fmt: skip
        bad = client.post("/distillations", json={"teacher": "nobody's", "prompt_file": file_id})
        assert bad.status_code in (400, 404) and bad.json()["error"]["param"] == "teacher"
    sent = stub.seen[asked:]
    assert (
        len(sent) == 20
        and {s["temperature"] for s in sent} == {0.7}
        and {s["seed"] for s in sent} == {3}
    )
    assert done["progress"] == {"total": 20, "done": 20, "failed": 0}
    assert done["usage"] == {"prompt_tokens": 140, "completion_tokens": 60, "total_tokens": 200}
    rows = [
        json.loads(line) for line in alice.files.content(done["output_file_id"]).text.splitlines()
    ]
    assert rows == [{"messages": [*p["messages"], {"role": "assistant", "content": STUB_ANSWER}]}
                    for p in prompts]  # fmt: skip
    job = alice.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=done["output_file_id"],
                                        hyperparameters={"n_epochs": 1, "batch_size": 4})  # fmt: skip
    trained = wait_until(lambda: (j := alice.fine_tuning.jobs.retrieve(job.id)).status in
                         ("succeeded", "failed", "cancelled") and j, what="SFT on it", timeout=300)  # fmt: skip
    assert trained.status == "succeeded", trained.error
