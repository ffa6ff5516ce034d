"""OpenAI's Batch API through the official ``openai`` SDK against ``gradacc serve`` with two
workers (PostgreSQL and Redis): a 200-line file mixing chat completions, completions and responses, one
line that is not JSON and one naming another tenant's model, completes with 198 answers equal to
the live endpoints' greedy answers and 2 error lines with their reasons, ``request_counts`` right;
a worker killed mid-batch (held there by the runner's failpoint) loses no line and answers none
twice, the other worker going on once its lease lapses; a batch cancelled mid-way keeps what it
finished; another tenant's batch is a 404."""

from __future__ import annotations

import io
import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Batch, Distillation, EvalRun
from tests.e2e.conftest import serve_with_keys
from tests.e2e.evals_checks import STUB_ANSWER, UPSTREAM
from tests.support import serves, wait_until
from tests.upstream_stub import StubUpstream, stub_upstream
from worker.consumer.batch_runner import HOLD
from worker.consumer.item_runner import HOLD as ITEMS_HOLD

pytestmark = pytest.mark.integration
MODEL = "builtin:tiny-chat"
TOKENS = 6
LINES, NOT_JSON, BOBS = 200, 57, 120  # 1-based line numbers


@dataclass
class Stack:
    settings: Settings
    alice: openai.OpenAI
    bob: openai.OpenAI
    url: str
    keys: dict[str, str]
    gate: Path  # the runner's failpoint: lines past the number it holds wait
    items_gate: Path  # the item runner's (eval runs, distillations)
    stub: StubUpstream  # a stand-in hosted model, routed as UPSTREAM


@pytest.fixture(scope="module", params=["pg_redis"])  # the production stack (SKIP LOCKED claims)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("batches")
    gate, items_gate, stub = home / "hold", home / "hold-items", StubUpstream(STUB_ANSWER)
    with stub_upstream(stub):
        env = {"GRADACC_PREDICT_SERVER": "true", "GRADACC_BATCH_LEASE_S": "3", HOLD: str(gate),
               ITEMS_HOLD: str(items_gate), "GRADACC_SERVE_TIMEOUT_S": "30",
               "GRADACC_SERVE_UPSTREAMS": json.dumps({UPSTREAM: {"base_url": stub.url}})}  # fmt: skip
        with serve_with_keys(request, home, env, workers=2) as (settings, url, keys):
            sdks = {t: openai.OpenAI(base_url=f"{url}/v1", api_key=k, max_retries=0, timeout=60)
                    for t, k in keys.items()}  # fmt: skip
            # The predict server listens once torch is imported: a 503 until then.
            wait_until(lambda: serves(sdks["alice"], MODEL), what="the predict server", timeout=60)
            yield Stack(settings, sdks["alice"], sdks["bob"], url, keys, gate, items_gate, stub)


def _body(kind: int, i: int) -> tuple[str, dict[str, Any]]:
    if kind == 0:
        return "/v1/chat/completions", {"model": MODEL, "temperature": 0,
            "max_completion_tokens": TOKENS,
            "messages": [{"role": "user", "content": f"what is {i % 10} plus {i % 7}?"}]}  # fmt: skip
    if kind == 1:
        return "/v1/completions", {"model": MODEL, "temperature": 0, "max_tokens": TOKENS,
                                   "prompt": f"{i} plus {i % 9} is"}  # fmt: skip
    return "/v1/responses", {"model": MODEL, "temperature": 0, "max_output_tokens": TOKENS,
                             "input": f"and {i % 5} minus {i % 3}?"}  # fmt: skip


def _text(url: str, body: Any) -> str:
    """The answer's text, whichever endpoint gave it."""
    if url == "/v1/chat/completions":
        return str(body["choices"][0]["message"]["content"])
    if url == "/v1/completions":
        return str(body["choices"][0]["text"])
    return "".join(part["text"] for item in body["output"] if item["type"] == "message"
                   for part in item["content"] if part["type"] == "output_text")  # fmt: skip


def _live(stack: Stack, url: str, body: dict[str, Any]) -> str:
    answer = httpx.post(f"{stack.url}{url}", json=body, timeout=60,
                        headers={"Authorization": f"Bearer {stack.keys['alice']}"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return _text(url, answer.json())


def _upload(sdk: openai.OpenAI, lines: list[str]) -> str:
    data = io.BytesIO("".join(line + "\n" for line in lines).encode())
    return sdk.files.create(file=("requests.jsonl", data), purpose="batch").id


def _bobs_model(stack: Stack) -> str:
    """A model of bob's (an upload: never asked, so any bytes will do)."""
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("config.json", b'{"model_type": "gpt2"}'),
                           ("model.safetensors", b"x" * 64)):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    sent = httpx.post(f"{stack.url}/v1/files", data={"purpose": "model"}, timeout=60,
                      files={"file": ("m.tar.gz", buffer.getvalue())},
                      headers={"Authorization": f"Bearer {stack.keys['bob']}"})  # fmt: skip
    assert sent.status_code == 201, sent.text
    return str(sent.json()["id"])


def _lines(count: int) -> list[tuple[str, dict[str, Any]]]:
    return [_body(i % 3, i) for i in range(1, count + 1)]


def _requests(bodies: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [json.dumps({"custom_id": f"line-{i}", "method": "POST", "url": url, "body": body})
            for i, (url, body) in enumerate(bodies, 1)]  # fmt: skip


def _wait(stack: Stack, batch_id: str, statuses: tuple[str, ...], timeout: float = 240) -> Any:
    return wait_until(
        lambda: (b := stack.alice.batches.retrieve(batch_id)).status in statuses and b,
        what=f"batch {batch_id} {statuses}", timeout=timeout,
    )  # fmt: skip


def _read(stack: Stack, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    text = stack.alice.files.content(file_id).text
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.timeout(900)  # 91 s alone; past 300 s with two suites at once (its 198 references)
def test_a_batch_answers_as_the_live_endpoints(stack: Stack) -> None:
    bodies = _lines(LINES)
    url, body = _body(0, BOBS)
    bodies[BOBS - 1] = (url, {**body, "model": _bobs_model(stack)})
    requests = _requests(bodies)
    requests[NOT_JSON - 1] = "this line is not JSON"
    batch = stack.alice.batches.create(input_file_id=_upload(stack.alice, requests),
                                       endpoint="/v1/chat/completions", completion_window="24h")  # fmt: skip
    assert batch.status == "validating" and batch.request_counts is not None
    assert batch.request_counts.total == LINES
    with pytest.raises(openai.NotFoundError):
        stack.bob.batches.retrieve(batch.id)
    done = _wait(stack, batch.id, ("completed", "failed"))
    assert done.status == "completed"
    assert (done.request_counts.total, done.request_counts.completed,
            done.request_counts.failed) == (LINES, LINES - 2, 2)  # fmt: skip
    output, errors = _read(stack, done.output_file_id), _read(stack, done.error_file_id)
    good = [i for i in range(1, LINES + 1) if i not in (NOT_JSON, BOBS)]
    assert [r["custom_id"] for r in output] == [f"line-{i}" for i in good]
    for record, i in zip(output, good, strict=True):
        url, body = bodies[i - 1]
        assert record["response"]["status_code"] == 200 and record["error"] is None
        assert _text(url, record["response"]["body"]) == _live(stack, url, body), i
    by_id = {r["custom_id"]: r for r in errors}
    assert set(by_id) == {None, f"line-{BOBS}"}
    assert by_id[None]["error"]["code"] == "invalid_json"
    bobs = by_id[f"line-{BOBS}"]
    assert bobs["response"]["status_code"] == 404 and bobs["error"]["code"] == "model_not_found"


def _holder(settings: Settings, batch_id: str) -> str | None:
    with session_scope(settings) as session:
        return session.scalar(select(Batch.holder).where(Batch.id == batch_id))


def test_a_killed_worker_loses_no_line_and_answers_none_twice(stack: Stack) -> None:
    bodies = _lines(12)
    expected = [_live(stack, url, body) for url, body in bodies]  # while both servers are up
    stack.gate.write_text("5")  # the runner parks before line 6
    try:
        batch = stack.alice.batches.create(input_file_id=_upload(stack.alice, _requests(bodies)),
                                           endpoint="/v1/completions", completion_window="1h")  # fmt: skip
        wait_until(lambda: stack.alice.batches.retrieve(batch.id).request_counts.completed == 5,  # type: ignore[union-attr]
                   what="five lines answered", timeout=180)  # fmt: skip
        holder = _holder(stack.settings, batch.id)
        assert holder is not None
        os.kill(int(holder.rsplit(":", 1)[1]), signal.SIGKILL)  # its name is host:pid
    finally:
        stack.gate.unlink(missing_ok=True)
    done = _wait(stack, batch.id, ("completed",))
    assert _holder(stack.settings, batch.id) is None
    output = _read(stack, done.output_file_id)
    assert [r["custom_id"] for r in output] == [f"line-{i}" for i in range(1, 13)]
    assert done.request_counts.completed == 12 and done.error_file_id is None
    for record, (url, _), text in zip(output, bodies, expected, strict=True):
        assert _text(url, record["response"]["body"]) == text


def test_a_cancelled_batch_keeps_what_it_finished(stack: Stack) -> None:
    stack.gate.write_text("3")
    try:
        batch = stack.alice.batches.create(input_file_id=_upload(stack.alice, _requests(_lines(9))),
                                           endpoint="/v1/responses", completion_window="24h")  # fmt: skip
        wait_until(lambda: stack.alice.batches.retrieve(batch.id).request_counts.completed == 3,  # type: ignore[union-attr]
                   what="three lines answered", timeout=180)  # fmt: skip
        # Its runner, polling the parked line every 0.2 s, may end it before the answer is read.
        assert stack.alice.batches.cancel(batch.id).status in ("cancelling", "cancelled")
        done = _wait(stack, batch.id, ("cancelled",), timeout=60)
    finally:
        stack.gate.unlink(missing_ok=True)
    assert done.request_counts.completed == 3 and done.cancelled_at is not None
    assert [r["custom_id"] for r in _read(stack, done.output_file_id)] == [
        "line-1", "line-2", "line-3"]  # fmt: skip
    assert [b.id for b in stack.bob.batches.list()] == []


def _kill_holder(stack: Stack, table: Any, run_id: str) -> None:
    with session_scope(stack.settings) as session:
        holder = session.scalar(select(table.holder).where(table.id == run_id))
    assert holder is not None
    os.kill(int(holder.rsplit(":", 1)[1]), signal.SIGKILL)  # its name is host:pid


def _asked(stack: Stack, marker: str) -> list[str]:
    """What the stand-in was asked whose last message holds ``marker``."""
    last = [s["messages"][-1]["content"] for s in stack.stub.seen]
    return [text for text in last if marker in text]


def test_a_killed_worker_grades_no_eval_item_twice(stack: Stack) -> None:
    """An eval run on the stand-in, its holder killed after 5 of 12 items: the other worker
    finishes it; every item is asked once and graded once."""
    items = [{"question": f"eval-kill {i}", "answer": "4" if i % 2 else "5"} for i in range(12)]
    made = stack.alice.evals.create(
        data_source_config={"type": "custom", "item_schema": {"type": "object"}},
        testing_criteria=[{"type": "string_check", "name": "eq", "operation": "eq",
                           "input": "{{sample.output_text}}", "reference": "{{item.answer}}"}])  # fmt: skip
    stack.items_gate.write_text("5")
    try:
        run = stack.alice.evals.runs.create(made.id, data_source={
            "type": "completions", "model": UPSTREAM,
            "input_messages": {"type": "item_reference", "item_reference": "item.question"},
            "source": {"type": "file_content", "content": [{"item": i} for i in items]}})  # type: ignore[arg-type,misc,list-item]  # fmt: skip
        wait_until(lambda: len(stack.alice.evals.runs.output_items.list(run.id, eval_id=made.id).data) == 5,
                   what="five items graded", timeout=120)  # fmt: skip
        _kill_holder(stack, EvalRun, run.id)
    finally:
        stack.items_gate.unlink(missing_ok=True)
    done = wait_until(lambda: (r := stack.alice.evals.runs.retrieve(run.id, eval_id=made.id))
                      .status == "completed" and r, what="the run", timeout=120)  # fmt: skip
    assert done.result_counts.model_dump() == {"total": 12, "passed": 6, "failed": 6, "errored": 0}
    outputs = list(stack.alice.evals.runs.output_items.list(run.id, eval_id=made.id, limit=100))
    assert sorted(o.datasource_item_id for o in outputs) == list(range(12))
    assert sorted(_asked(stack, "eval-kill")) == sorted(i["question"] for i in items)


def test_a_killed_worker_asks_the_teacher_once_a_row(stack: Stack) -> None:
    prompts = [{"prompt": f"distill-kill {i}"} for i in range(12)]
    data = io.BytesIO("".join(json.dumps(p) + "\n" for p in prompts).encode())
    file_id = stack.alice.files.create(file=("p.jsonl", data), purpose="evals").id  # type: ignore[arg-type]
    headers = {"Authorization": f"Bearer {stack.keys['alice']}"}
    with httpx.Client(base_url=f"{stack.url}/v1", headers=headers, timeout=60) as client:
        stack.items_gate.write_text("5")
        try:
            made = client.post("/distillations", json={"teacher": UPSTREAM, "prompt_file": file_id})
            assert made.status_code == 200, made.text
            path = f"/distillations/{made.json()['id']}"
            wait_until(lambda: client.get(path).json()["progress"]["done"] == 5,
                       what="five rows answered", timeout=120)  # fmt: skip
            _kill_holder(stack, Distillation, made.json()["id"])
        finally:
            stack.items_gate.unlink(missing_ok=True)
        done = wait_until(lambda: (d := client.get(path).json())["status"] == "completed" and d,
                          what="the distillation", timeout=120)  # fmt: skip
        bobs = httpx.get(
            f"{stack.url}/v1{path}", headers={"Authorization": f"Bearer {stack.keys['bob']}"}
        )
        assert bobs.status_code == 404
    assert sorted(_asked(stack, "distill-kill")) == sorted(p["prompt"] for p in prompts)
    rows = _read(stack, done["output_file_id"])
    assert [r["messages"][0]["content"] for r in rows] == [p["prompt"] for p in prompts]


def test_a_canceled_eval_run_and_distillation_keep_what_they_finished(stack: Stack) -> None:
    made = stack.alice.evals.create(
        data_source_config={"type": "custom", "item_schema": {"type": "object"}},
        testing_criteria=[{"type": "string_check", "name": "eq", "operation": "eq",
                           "input": "{{sample.output_text}}", "reference": "4"}])  # fmt: skip
    items = [{"item": {"question": f"cancel {i}"}} for i in range(9)]
    prompts = io.BytesIO("".join(json.dumps({"prompt": f"c{i}"}) + "\n" for i in range(9)).encode())
    file_id = stack.alice.files.create(file=("c.jsonl", prompts), purpose="evals").id
    headers = {"Authorization": f"Bearer {stack.keys['alice']}"}
    stack.items_gate.write_text("3")
    try:
        run = stack.alice.evals.runs.create(made.id, data_source={
            "type": "completions", "model": UPSTREAM, "source": {"type": "file_content", "content": items},
            "input_messages": {"type": "item_reference", "item_reference": "item.question"}})  # type: ignore[arg-type,misc]  # fmt: skip
        listed = lambda: stack.alice.evals.runs.output_items.list(run.id, eval_id=made.id).data  # noqa: E731
        wait_until(lambda: len(listed()) == 3, what="three items graded", timeout=120)
        # The runner, polling the parked item every 0.2 s, may end it before the answer is read
        # (seen with two suites at once).
        assert stack.alice.evals.runs.cancel(run.id, eval_id=made.id).status in (
            "canceling", "canceled")  # fmt: skip
        done = wait_until(lambda: (r := stack.alice.evals.runs.retrieve(run.id, eval_id=made.id))
                          .status == "canceled" and r, what="the run canceled", timeout=60)  # fmt: skip
        assert done.result_counts.passed == 3 and done.result_counts.total == 9
        with httpx.Client(base_url=f"{stack.url}/v1", headers=headers, timeout=60) as client:
            made_d = client.post(
                "/distillations", json={"teacher": UPSTREAM, "prompt_file": file_id}
            )
            path = f"/distillations/{made_d.json()['id']}"
            wait_until(lambda: client.get(path).json()["progress"]["done"] == 3,
                       what="three rows answered", timeout=120)  # fmt: skip
            assert client.post(f"{path}/cancel").json()["status"] in ("canceling", "canceled")
            ended = wait_until(lambda: (d := client.get(path).json())["status"] == "canceled" and d,
                               what="the distillation canceled", timeout=60)  # fmt: skip
    finally:
        stack.items_gate.unlink(missing_ok=True)
    assert [r["messages"][0]["content"] for r in _read(stack, ended["output_file_id"])] == [
        "c0", "c1", "c2"]  # fmt: skip
    assert len(listed()) == 3  # nothing graded after the cancel
