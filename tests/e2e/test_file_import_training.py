"""An imported export trains unchanged, through the official ``openai`` SDK against a live
``gradacc serve`` (embedded stack): 100 stored completions, one cut at max_tokens, imported in one
call (the SDK's own ``post``, as docs/imports.md shows) into a fine-tune file of 99 rows with the
bad line named; a supervised job on it succeeds, and its ``trained_tokens`` is transformers' own
count of each stored answer (earlier assistant turns of a request, input, are not trained); the
file is its tenant's alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import NO_PREDICT, serve_with_keys
from tests.e2e.test_openai_sdk import wait_status
from tests.stored_completions import conversation, export
from tests.tools_rows import reference
from trainer_core.builtin.models import builtin_tokenizer

pytestmark = pytest.mark.integration

RECORDS, TRUNCATED = 100, 37


@pytest.fixture(scope="module", params=["embedded"])
def clients(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, openai.OpenAI]]:
    home = tmp_path_factory.mktemp("file_import")
    with serve_with_keys(request, home, NO_PREDICT) as (_, url, keys):  # nothing predicts here
        yield {tenant: openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)
               for tenant, key in keys.items()}  # fmt: skip


def answer_tokens(i: int) -> tuple[int, int]:
    """Record ``i``'s stored answer in tokens, by transformers' chat template and assistant mask
    over the conversation as the client sent it (text parts joined): the mask's last run, the
    answer, which ends the conversation; and every assistant token of it (after the shift)."""
    messages, answer, tools = conversation(i)
    plain = [m | {"content": "".join(p["text"] for p in m["content"])}
             if isinstance(m["content"], list) else m for m in messages]  # fmt: skip
    _, mask = reference(builtin_tokenizer("builtin:tiny-chat"), {"messages": [*plain, answer], "tools": tools})  # fmt: skip
    run = 0
    for bit in reversed(mask):
        if bit == 0 and run:
            break
        run += bit
    return run, sum(mask[1:])


def test_an_imported_export_trains_unchanged(clients: dict[str, openai.OpenAI]) -> None:
    alice, bob = clients["alice"], clients["bob"]
    imported: Any = alice.post(
        "/files/import",
        cast_to=object,
        body={"format": "stored-completions"},
        files=[("file", ("export.jsonl", export(RECORDS, truncated=TRUNCATED)))],
        options={"headers": {"Content-Type": "multipart/form-data"}},
    )
    assert imported["refused_rows"] == 1 and imported["refused"][0]["line"] == TRUNCATED
    file = alice.files.retrieve(imported["id"])
    assert file.purpose == "fine-tune"
    with pytest.raises(openai.NotFoundError):
        bob.files.retrieve(file.id)
    job = alice.fine_tuning.jobs.create(
        model="builtin:tiny-chat",
        training_file=file.id,
        method={"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 1,
                                                                         "batch_size": 9}}},
    )  # fmt: skip
    job = wait_status(alice, job.id, "succeeded")
    good = [i for i in range(RECORDS) if i + 1 != TRUNCATED]
    answers, every_turn = (sum(n) for n in zip(*(answer_tokens(i) for i in good), strict=True))
    assert job.trained_tokens == answers < every_turn  # earlier turns of a request: input
    summary = alice.get(f"/jobs/{job.id}", cast_to=object)["summary"]  # type: ignore[index]
    assert summary["num_train_samples"] == len(good)
