"""A team coming from OpenAI trains what it gave, through the official ``openai`` SDK against a
live ``gradacc serve`` (embedded stack, one server for the module): long answers behind a long
system prompt train every token (``trained_tokens`` is transformers' own count of the assistant
tokens), no validation file holds nothing out (60 rows, 60 trained), and a row longer than the
model's context fails the job naming the file and the row, as OpenAI refuses it; a
function-calling file trains its tool calls (``trained_tokens`` counts them, tool results not)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import NO_PREDICT, serve_with_keys
from tests.e2e.test_openai_sdk import wait_status
from tests.tools_rows import reference as tools_reference
from tests.tools_rows import tool_rows
from trainer_core.builtin.models import MAX_POSITIONS, builtin_tokenizer

pytestmark = pytest.mark.integration

ROWS = 60
SYSTEM = "You add numbers. " + " ".join(f"{a} + {a} = {2 * a}." for a in range(30))  # 264 tokens


def conversation(i: int, answer_terms: int) -> list[dict[str, str]]:
    answer = " ".join(f"{i} + {k} = {i + k}, so" for k in range(answer_terms))
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Count up from {i}."},
        {"role": "assistant", "content": f"{answer} done."},
    ]


def jsonl(conversations: list[list[dict[str, str]]]) -> bytes:
    return "".join(json.dumps({"messages": c}) + "\n" for c in conversations).encode()


def reference(conversations: list[list[dict[str, str]]]) -> list[tuple[int, int]]:
    """(tokens, trained tokens after the shift) per row, by transformers' chat template and its
    assistant mask: a count the service does not make."""
    tokenizer = builtin_tokenizer("builtin:tiny-chat")
    found = []
    for c in conversations:
        out = tokenizer.apply_chat_template(c, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)  # fmt: skip
        found.append((len(out["input_ids"]), sum(out["assistant_masks"][1:])))
    return found


@pytest.fixture(scope="module", params=["embedded"])
def alice(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    home = tmp_path_factory.mktemp("whole_rows")
    with serve_with_keys(request, home, NO_PREDICT) as (_, url, keys):  # nothing predicts here
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=keys["alice"], max_retries=0,
                            timeout=60)  # fmt: skip


def create(client: openai.OpenAI, rows: list[list[dict[str, str]]]) -> Any:
    file = client.files.create(file=("train.jsonl", jsonl(rows)), purpose="fine-tune")
    return client.fine_tuning.jobs.create(
        model="builtin:tiny-chat",
        training_file=file.id,
        method={"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 1,
                                                                         "batch_size": 10}}},
    )  # fmt: skip


def test_long_answers_and_every_row_train_whole(alice: openai.OpenAI) -> None:
    rows = [conversation(i, answer_terms=6 + i % 10) for i in range(ROWS)]
    counts = reference(rows)
    # Longer than the old default of 128 tokens (the system prompt alone is), within the context.
    assert min(n for n, _ in counts) > 256 and max(n for n, _ in counts) <= MAX_POSITIONS
    job = wait_status(alice, create(alice, rows).id, "succeeded")
    assert job.trained_tokens == sum(trained for _, trained in counts)  # one epoch, every row
    assert job.validation_file is None
    summary = alice.get(f"/jobs/{job.id}", cast_to=object)["summary"]  # type: ignore[index]
    assert (summary["num_train_samples"], summary["num_eval_samples"]) == (ROWS, 0)
    warnings = [e.message for e in alice.fine_tuning.jobs.list_events(job.id, limit=100)
                if e.level == "warn"]  # fmt: skip
    assert not any("truncat" in w or "held out" in w for w in warnings), warnings


def test_a_row_longer_than_the_context_fails_naming_it(alice: openai.OpenAI) -> None:
    rows = [conversation(i, answer_terms=5) for i in range(5)]
    rows[2] = conversation(2, answer_terms=60)
    (tokens, _) = reference([rows[2]])[0]
    assert tokens > MAX_POSITIONS
    job = wait_status(alice, create(alice, rows).id, "failed", "succeeded")
    assert job.status == "failed" and job.error is not None
    assert job.error.param == "training_file"
    assert job.error.message.startswith(
        f"training_file: row 3 is {tokens} tokens long; this job trains on at most "
        f"{MAX_POSITIONS} tokens a row"
    )


def _without_calls(row: dict[str, Any]) -> dict[str, Any]:
    """The row less its tool-calling turns and their results: what would train without them."""
    kept = [m for m in row["messages"] if m["role"] != "tool" and not m.get("tool_calls")]
    return {"messages": kept, "tools": row.get("tools")}


def test_a_function_calling_file_trains_its_tool_calls(alice: openai.OpenAI) -> None:
    rows = tool_rows(20)
    tokenizer = builtin_tokenizer("builtin:tiny-chat")
    masks = [tools_reference(tokenizer, row)[1] for row in rows]
    expected = sum(sum(mask[1:]) for mask in masks)  # transformers' count, after the shift
    answers_only = sum(sum(tools_reference(tokenizer, _without_calls(r))[1][1:]) for r in rows)
    calls = sum(len(m.get("tool_calls") or []) for r in rows for m in r["messages"])
    assert expected - answers_only > 10 * calls  # the calls are a real part of the count
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    file = alice.files.create(file=("tools.jsonl", data), purpose="fine-tune")
    job = alice.fine_tuning.jobs.create(
        model="builtin:tiny-chat",
        training_file=file.id,
        method={"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 1,
                                                                         "batch_size": 5}}},
    )  # fmt: skip
    job = wait_status(alice, job.id, "succeeded")
    assert job.trained_tokens == expected
