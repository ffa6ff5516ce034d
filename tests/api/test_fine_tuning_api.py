"""The OpenAI fine-tuning API in-process, on both databases, driven by the official ``openai``
SDK over the app's own transport (no worker: jobs stay queued). The whole loop with a live
server and real training is tests/e2e/test_openai_sdk.py; here: the body's translation and the
"auto" rules, OpenAI's error shape and classes with ``param``, tenants, listing with metadata
filters, pause and resume of a queued job, models and the OpenAI file object."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.main import create_app
from api.schemas.openai import FineTuningJobCreate
from api.services.fine_tuning_create import _job_create, auto_batch_size, auto_epochs
from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.errors import InvalidRequest
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.tables import WebhookDelivery
from tests.api.test_chat_data import GOOD, jsonl


@pytest.fixture
def app_client(db_settings: Settings) -> Iterator[TestClient]:
    settings = db_settings.model_copy(update={"require_auth": True, "webhook_allow_private": True})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.app.state.test_settings = settings  # type: ignore[attr-defined]
        yield client


def sdk(client: TestClient, tenant: str | None) -> openai.OpenAI:
    key = "gak_not-a-key"
    if tenant is not None:
        with session_scope(client.app.state.test_settings) as session:  # type: ignore[attr-defined]
            key = create_api_key(session, tenant=tenant)
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key=key, http_client=client, max_retries=0
    )


def chat_file(client: openai.OpenAI, rows: int = 20) -> Any:
    data = jsonl((GOOD * rows)[:rows])
    return client.files.create(file=("train.jsonl", data), purpose="fine-tune")


def test_auto_rules() -> None:
    assert [auto_epochs(n) for n in (10, 40, 100, 5000, 20_000)] == [10, 3, 3, 3, 1]
    assert auto_epochs(1) == 25 and auto_epochs(9000) == 2
    assert [auto_batch_size(n) for n in (10, 1000, 10_000, 500_000)] == [1, 2, 20, 256]


def test_create_translates_the_body_and_shows_the_resolved_values(app_client: TestClient) -> None:
    alice = sdk(app_client, "alice")
    file = chat_file(alice)
    assert (file.object, file.purpose, file.status, file.bytes) == (
        "file", "fine-tune", "processed", len(jsonl((GOOD * 20)[:20])),
    )  # fmt: skip
    job = alice.fine_tuning.jobs.create(
        model="builtin:tiny-chat",
        training_file=file.id,
        suffix="arith",
        seed=7,
        metadata={"team": "nlp", "run": "1"},
        method={"type": "supervised",
                "supervised": {"hyperparameters": {"batch_size": 4, "n_epochs": "auto",
                                                   "learning_rate_multiplier": 2}}},
        extra_body={"gradacc": {"backend": "pytorch", "gradient_accumulation_steps": 2}},
    )  # fmt: skip
    assert job.object == "fine_tuning.job" and job.status == "queued"
    assert job.organization_id == "alice" and job.seed == 7 and job.fine_tuned_model is None
    assert job.hyperparameters.n_epochs == 5  # 20 rows: ceil(100 / 20)
    assert job.hyperparameters.batch_size == 4
    assert job.metadata == {"team": "nlp", "run": "1"} and job.user_provided_suffix == "arith"
    # The same job on /v1/jobs, as the gradacc spec it became.
    spec = alice.get(f"/jobs/{job.id}", cast_to=object)["spec"]  # type: ignore[index]
    assert spec["dataset"] == file.id and spec["num_train_epochs"] == 5 and spec["seed"] == 7
    assert spec["effective_batch_size"] == 4 and spec["per_device_train_batch_size"] == 2
    assert spec["gradient_accumulation_steps"] == 2 and spec["backend"] == "pytorch"
    assert spec["learning_rate"] == pytest.approx(2 * 5e-4) and spec["save_total_limit"] == 3
    # As OpenAI: rows whole up to the model's context (the core caps the server's limit at the
    # tokenizer's), a longer row refused, nothing held out without a validation_file.
    settings = app_client.app.state.test_settings  # type: ignore[attr-defined]
    assert spec["max_seq_length"] == settings.max_seq_length and spec["overlong_rows"] == "refuse"
    assert spec["validation_split_percentage"] == 0 and spec["eval_dataset"] is None
    events = alice.fine_tuning.jobs.list_events(job.id)
    assert [e.message for e in events.data] == ["job created"] and events.data[0].level == "info"


def test_errors_are_openais_with_param(app_client: TestClient) -> None:
    alice, bob = sdk(app_client, "alice"), sdk(app_client, "bob")
    file = chat_file(alice)
    cases: list[tuple[dict[str, Any], type[Exception], str | None]] = [
        ({"model": "no such model!", "training_file": file.id}, openai.BadRequestError, "model"),
        ({"model": "builtin:tiny-chat", "training_file": "file-0123456789abcdef0123"},
         openai.BadRequestError, "training_file"),
        ({"model": "builtin:tiny-chat", "training_file": file.id, "suffix": "a:b"},
         openai.BadRequestError, "suffix"),
        ({"model": "builtin:tiny-chat", "training_file": file.id,
          "method": {"type": "reinforcement"}}, openai.BadRequestError, "method.reinforcement"),
        ({"model": "builtin:tiny-chat", "training_file": file.id, "method": {"type": "dpo"}},
         openai.BadRequestError, "training_file"),  # a chat file: no pairs to train dpo on
        ({"model": "builtin:tiny-chat", "training_file": file.id,
          "integrations": [{"type": "wandb", "wandb": {"project": "x"}}]},
         openai.BadRequestError, "integrations"),
        ({"model": "builtin:tiny-chat", "training_file": file.id,
          "extra_body": {"gradacc": {"num_train_epochs": 3}}},
         openai.BadRequestError, "gradacc.num_train_epochs"),
        ({"model": "builtin:tiny-chat", "training_file": file.id,
          "extra_body": {"gradacc": {"backend": "jax"}}},
         openai.BadRequestError, "gradacc.backend"),
        ({"model": "ft:builtin:tiny-chat:alice::job_0123456789abcdef0123",
          "training_file": file.id}, openai.BadRequestError, "model"),
    ]  # fmt: skip
    for body, error, param in cases:
        with pytest.raises(error) as raised:
            alice.fine_tuning.jobs.create(**body)
        assert raised.value.param == param, (body, raised.value.body)  # type: ignore[attr-defined]
        assert raised.value.body["type"] == "invalid_request_error"  # type: ignore[attr-defined,index]
    with pytest.raises(openai.BadRequestError) as raised:
        alice.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=file.id,
                                      metadata={f"k{i}": "v" for i in range(17)})  # fmt: skip
    assert raised.value.param == "metadata"
    # Another tenant's file, then its job: neither exists for bob.
    with pytest.raises(openai.BadRequestError) as raised:
        bob.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=file.id)
    assert raised.value.param == "training_file"
    job = alice.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=file.id)
    for call in (bob.fine_tuning.jobs.retrieve, bob.fine_tuning.jobs.cancel,
                 bob.fine_tuning.jobs.list_events, bob.fine_tuning.jobs.checkpoints.list):  # fmt: skip
        with pytest.raises(openai.NotFoundError) as missing:
            call(job.id)
        assert missing.value.param == "job_id"
    assert bob.fine_tuning.jobs.list().data == []
    with pytest.raises(openai.AuthenticationError) as unauthorized:
        sdk(app_client, None).fine_tuning.jobs.list()
    assert unauthorized.value.param == "Authorization"
    with pytest.raises(openai.BadRequestError) as bad_upload:
        alice.files.create(file=("t.jsonl", b'{"text": "plain"}\n'), purpose="fine-tune")
    assert bad_upload.value.param == "file"


def test_list_pages_and_filters_on_metadata(app_client: TestClient) -> None:
    alice = sdk(app_client, "alice")
    file = chat_file(alice)
    made = [
        alice.fine_tuning.jobs.create(
            model="builtin:tiny-chat", training_file=file.id, metadata={"team": team}
        )
        for team in ("a", "b", "a")
    ]
    first = alice.fine_tuning.jobs.list(limit=2)
    assert [j.id for j in first.data] == [made[2].id, made[1].id] and first.has_more
    rest = alice.fine_tuning.jobs.list(limit=2, after=first.data[-1].id)
    assert [j.id for j in rest.data] == [made[0].id] and not rest.has_more
    everything = [j.id for j in alice.fine_tuning.jobs.list(limit=1)]  # the SDK pages itself
    assert everything == [made[2].id, made[1].id, made[0].id]
    team_a = alice.fine_tuning.jobs.list(metadata={"team": "a"})
    assert [j.id for j in team_a.data] == [made[2].id, made[0].id]
    # /v1/jobs jobs are not fine-tuning jobs, and the other way round they are the same rows.
    assert len(alice.get("/jobs", cast_to=object)["data"]) == 3  # type: ignore[index]


def test_pause_resume_and_cancel_a_queued_job(app_client: TestClient) -> None:
    alice = sdk(app_client, "alice")
    file = chat_file(alice)
    job = alice.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=file.id)
    assert alice.fine_tuning.jobs.pause(job.id).status == "paused"
    with pytest.raises(openai.ConflictError):
        alice.fine_tuning.jobs.pause(job.id)
    assert alice.fine_tuning.jobs.resume(job.id).status == "queued"
    with pytest.raises(openai.ConflictError):
        alice.fine_tuning.jobs.resume(job.id)
    alice.fine_tuning.jobs.pause(job.id)
    assert alice.fine_tuning.jobs.cancel(job.id).status == "cancelled"
    kinds = [e.message for e in alice.fine_tuning.jobs.list_events(job.id)]
    assert kinds[0] == "cancelled by request" and "resumed: queued again" in kinds


def test_models_list_retrieve_and_refuse_deleting_a_base_model(app_client: TestClient) -> None:
    alice = sdk(app_client, "alice")
    ids = [m.id for m in alice.models.list()]
    assert "builtin:tiny-chat" in ids and all(not i.startswith("ft:") for i in ids)
    assert alice.models.retrieve("builtin:tiny-chat").owned_by == "gradacc"
    with pytest.raises(openai.NotFoundError):
        alice.models.retrieve("ft:builtin:tiny-chat:alice:x:job_0123456789abcdef0123")
    with pytest.raises(openai.PermissionDeniedError) as refused:
        alice.models.delete("builtin:tiny-chat")
    assert refused.value.param == "model"


def test_files_list_filters_on_purpose(app_client: TestClient) -> None:
    alice = sdk(app_client, "alice")
    tuned = chat_file(alice)
    plain = alice.files.create(file=("d.jsonl", jsonl(GOOD)), purpose="dataset")  # type: ignore[arg-type]
    assert [f.id for f in alice.files.list(purpose="fine-tune")] == [tuned.id]
    assert {f.id for f in alice.files.list()} == {tuned.id, plain.id}
    first = alice.files.content(tuned.id).read().splitlines()[0]  # the bytes as uploaded
    assert json.loads(first) == GOOD[0]


def test_fine_tuned_names_are_read_from_the_right() -> None:
    job = "job_0123456789abcdef0123"
    name = fine_tuned.parse(f"ft:builtin:tiny-chat:alice:arith:{job}:ckpt-step-10")
    assert name == fine_tuned.FineTunedName("builtin:tiny-chat", "alice", "arith", job, 10)
    name = fine_tuned.parse(f"ft:Qwen/Qwen2.5-0.5B:bob::{job}")
    assert name == fine_tuned.FineTunedName("Qwen/Qwen2.5-0.5B", "bob", "", job, None)
    for wrong in (f"ft:alice:arith:{job}", "ft:a:b:c:job_1", f"builtin:tiny-chat:a:b:{job}"):
        assert fine_tuned.parse(wrong) is None, wrong


def test_webhooks_carry_openais_event_names(app_client: TestClient) -> None:
    alice = sdk(app_client, "alice")
    file = chat_file(alice)
    hook = {"gradacc": {"webhook_url": "http://127.0.0.1:9/hook"}}
    job = alice.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=file.id,
                                        extra_body=hook)  # fmt: skip
    alice.fine_tuning.jobs.cancel(job.id)
    with session_scope(app_client.app.state.test_settings) as session:  # type: ignore[attr-defined]
        events = session.scalars(
            select(WebhookDelivery.event).where(WebhookDelivery.job_id == job.id)
        )
        assert list(events) == ["fine_tuning.job.cancelled"]


FILE = "file-" + "0" * 20  # the shape of an uploaded file's id (the mapping reads no file)


@pytest.mark.parametrize(
    ("gradacc", "micro_batch"),
    [({}, 16), ({"gradient_accumulation_steps": 2}, 8), ({"num_processes": 2}, 8),
     ({"num_processes": 2, "gradient_accumulation_steps": 4}, 2)],
)  # fmt: skip
def test_the_micro_batch_follows_batch_size_k_and_the_processes(
    gradacc: dict[str, Any], micro_batch: int
) -> None:
    """b = batch_size / (K x num_processes): a job over 2 processes with no micro-batch given is
    taken, with the effective batch OpenAI's batch_size."""
    body = FineTuningJobCreate.model_validate(
        {"model": "builtin:tiny-chat", "training_file": FILE, "gradacc": gradacc}
    )
    resolved = {"batch_size": 16, "n_epochs": 1, "learning_rate_multiplier": 1.0}
    spec = _job_create(body, resolved)
    assert spec.per_device_train_batch_size == micro_batch and spec.effective_batch_size == 16


def test_a_batch_size_the_processes_do_not_divide_names_the_rule() -> None:
    body = FineTuningJobCreate.model_validate(
        {"model": "builtin:tiny-chat", "training_file": FILE, "gradacc": {"num_processes": 3}}
    )
    resolved = {"batch_size": 16, "n_epochs": 1, "learning_rate_multiplier": 1.0}
    with pytest.raises(InvalidRequest) as refused:
        _job_create(body, resolved)
    assert refused.value.param == "gradacc.gradient_accumulation_steps"
    assert refused.value.message.endswith(
        "batch_size 16 is not a multiple of gradient_accumulation_steps 1 x num_processes 3"
    )
