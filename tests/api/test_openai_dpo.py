"""OpenAI's ``method: dpo`` in-process through the official SDK (both databases, no worker): the
body becomes a dpo spec, "auto" resolves by the rules of docs/openai.md and the job object echoes
``method.dpo`` with the resolved values; every refusal is a 400 naming OpenAI's field and its
bound. The trained loop with a live worker is tests/e2e/test_openai_sdk.py."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from tests.api.test_chat_data import GOOD, jsonl
from tests.api.test_fine_tuning_api import app_client, sdk  # noqa: F401  (the fixture)
from tests.api.test_preference_data import OPENAI_PAIR


def _pairs(client: openai.OpenAI, rows: int = 20) -> Any:
    return client.files.create(file=("pairs.jsonl", jsonl([OPENAI_PAIR] * rows)),
                               purpose="fine-tune")  # fmt: skip


def test_a_dpo_body_becomes_a_dpo_spec_and_echoes_its_resolved_values(
    app_client: TestClient,  # noqa: F811
) -> None:
    alice = sdk(app_client, "alice")
    file = _pairs(alice)
    job = alice.fine_tuning.jobs.create(
        model="builtin:tiny-chat",
        training_file=file.id,
        method={"type": "dpo", "dpo": {"hyperparameters": {"beta": 0.25, "batch_size": 4}}},
        extra_body={"gradacc": {"dpo_loss": "ipo", "rpo_alpha": 0.5,
                                "reference_logprobs": "online"}},
    )  # fmt: skip
    assert job.method is not None and job.method.type == "dpo" and job.method.dpo is not None
    resolved = job.method.dpo.hyperparameters
    assert resolved is not None
    # 20 pairs: ceil(100 / 20) epochs; the multiplier's "auto" is 1.
    assert (resolved.beta, resolved.batch_size, resolved.n_epochs) == (0.25, 4, 5)
    assert resolved.learning_rate_multiplier == 1.0
    assert job.hyperparameters is not None and job.hyperparameters.n_epochs == 5
    spec = alice.get(f"/jobs/{job.id}", cast_to=object)["spec"]  # type: ignore[index]
    assert (spec["method"], spec["dpo_beta"], spec["dpo_loss"]) == ("dpo", 0.25, "ipo")
    assert (spec["rpo_alpha"], spec["reference_logprobs"]) == (0.5, "online")
    assert spec["effective_batch_size"] == 4 and spec["num_train_epochs"] == 5
    again = alice.fine_tuning.jobs.retrieve(job.id)
    assert again.method is not None and again.method.model_dump() == job.method.model_dump()
    auto = alice.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=file.id,
                                         method={"type": "dpo"})  # fmt: skip
    assert auto.method is not None and auto.method.dpo is not None
    assert auto.method.dpo.hyperparameters is not None
    assert auto.method.dpo.hyperparameters.beta == 0.1  # "auto": the spec's and TRL's default


def test_a_supervised_job_shows_no_beta(app_client: TestClient) -> None:  # noqa: F811
    alice = sdk(app_client, "alice")
    chat = alice.files.create(file=("chat.jsonl", jsonl(GOOD * 10)), purpose="fine-tune")
    job = alice.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=chat.id)
    assert job.method is not None and job.method.type == "supervised" and job.method.dpo is None
    spec = alice.get(f"/jobs/{job.id}", cast_to=object)["spec"]  # type: ignore[index]
    assert spec["method"] == "sft"


def _refused(client: openai.OpenAI, **body: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as refused:
        client.fine_tuning.jobs.create(model="builtin:tiny-chat", **body)
    return refused.value


def test_each_wrong_dpo_body_is_a_400_naming_its_field(app_client: TestClient) -> None:  # noqa: F811
    alice = sdk(app_client, "alice")
    pairs = _pairs(alice).id
    chat = alice.files.create(file=("chat.jsonl", jsonl(GOOD * 10)), purpose="fine-tune").id
    dpo = {"type": "dpo"}
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"training_file": pairs, "method": {**dpo, "dpo": {"hyperparameters": {"beta": 0}}}},
         "method.dpo.hyperparameters.beta", "beta must be 'auto' or a number above 0 and at most 10"),
        ({"training_file": pairs, "method": {**dpo, "dpo": {"hyperparameters": {"n_epochs": 0}}}},
         "method.dpo.hyperparameters.n_epochs", "n_epochs must be 'auto' or an integer from 1"),
        ({"training_file": pairs, "method": {**dpo, "supervised": {}}},
         "method.supervised", "given, but method.type is 'dpo'"),
        ({"training_file": pairs, "method": dpo, "hyperparameters": {"n_epochs": 2}},
         "hyperparameters", "give method.dpo.hyperparameters"),
        ({"training_file": chat, "method": dpo}, "training_file", "method dpo trains preference"),
        ({"training_file": pairs}, "training_file", "train it with method dpo"),
        ({"training_file": pairs, "method": dpo, "extra_body": {"gradacc": {"dpo_beta": 1}}},
         "gradacc.dpo_beta", "set by method.dpo.hyperparameters.beta"),
        ({"training_file": pairs, "method": dpo, "extra_body": {"gradacc": {"method": "sft"}}},
         "gradacc.method", "set by method.type"),
        ({"training_file": pairs, "method": dpo, "extra_body": {"gradacc": {"dpo_loss": "kto"}}},
         "gradacc.dpo_loss", "its reference point is a statistic of the micro-batch"),
    ]  # fmt: skip
    for body, param, said in cases:
        error = _refused(alice, **body)
        assert error.param == param, (body, error.body)
        assert said in str(error.message), (body, error.message)
    assert alice.fine_tuning.jobs.list().data == []  # nothing half-made
