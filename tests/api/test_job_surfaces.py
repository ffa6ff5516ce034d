"""What a user gave shows on our own surfaces (both databases, in-process): a fine-tuning job's
name, suffix and metadata on /v1/jobs (and its metadata filter), a succeeded job's
``fine_tuned_model`` named after its root model however deep it was trained, the epoch-end
validation loss in the fine-tuning API's metrics events, and the step's token accuracy in its
checkpoint metrics."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.db import session_scope
from gradacc.jobs.records import record_epoch_metrics, record_step_metrics
from gradacc.openai.results import results_csv
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.tables import FINE_TUNING_API, JobStatus
from tests.api.test_fine_tuning_api import chat_file, sdk
from tests.support import JOB_SPEC, make_job
from trainer_core.spec.outputs import CHECKPOINT_DIR, CHECKPOINT_STATE

FT = {"hyperparameters": {"n_epochs": 2, "batch_size": 4, "learning_rate_multiplier": 1.0},
      "method": {"type": "supervised"}, "training_file": "file-x"}  # fmt: skip


@pytest.fixture
def app_client(db_settings: Settings) -> Iterator[TestClient]:
    settings = db_settings.model_copy(update={"require_auth": True})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.app.state.test_settings = settings  # type: ignore[attr-defined]
        yield client


def v1_job(client: openai.OpenAI, job_id: str) -> Any:
    return client.get(f"/jobs/{job_id}", cast_to=object)


def ft_job(app_client: TestClient, **values: Any) -> str:
    settings = app_client.app.state.test_settings  # type: ignore[attr-defined]
    fields = {"tenant": "alice", "api": FINE_TUNING_API} | values
    return make_job(settings, **fields)


def test_v1_jobs_shows_the_fine_tuning_bodys_name_suffix_and_metadata(
    app_client: TestClient,
) -> None:
    alice = sdk(app_client, "alice")
    file = chat_file(alice)
    job = alice.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=file.id,
                                        suffix="arith", metadata={"team": "nlp"},
                                        extra_body={"gradacc": {"name": "sweep-1"}})  # fmt: skip
    shown = v1_job(alice, job.id)
    assert (shown["name"], shown["suffix"], shown["metadata"]) == (
        "sweep-1",
        "arith",
        {"team": "nlp"},
    )
    assert shown["fine_tuned_model"] is None  # queued
    listed = alice.get("/jobs", cast_to=object, options={"params": {"metadata[team]": "nlp"}})
    assert [(j["id"], j["suffix"]) for j in listed["data"]] == [(job.id, "arith")]  # type: ignore[index]
    other = alice.get("/jobs", cast_to=object, options={"params": {"metadata[team]": "cv"}})
    assert other["data"] == []  # type: ignore[index]


def test_a_model_name_is_rooted_however_deep_it_was_trained(app_client: TestClient) -> None:
    """A job trained from a checkpoint of a fine-tuned model is named after the root model, not
    ``ft:ft:…``, and the name resolves to it; a nested name from before still resolves."""
    alice = sdk(app_client, "alice")
    first = ft_job(app_client, status=JobStatus.SUCCEEDED, fine_tuning=FT | {"suffix": "arith"},
                   spec=JOB_SPEC | {"model": "builtin:tiny-chat"})  # fmt: skip
    first_name = v1_job(alice, first)["fine_tuned_model"]
    assert first_name == f"ft:builtin:tiny-chat:alice:arith:{first}"
    second = ft_job(app_client, status=JobStatus.SUCCEEDED,
                    fine_tuning=FT | {"suffix": "from-ckpt"},
                    spec=JOB_SPEC | {"model": f"{first_name}:ckpt-step-600"})  # fmt: skip
    second_name = v1_job(alice, second)["fine_tuned_model"]
    assert second_name == f"ft:builtin:tiny-chat:alice:from-ckpt:{second}"
    assert alice.fine_tuning.jobs.retrieve(second).fine_tuned_model == second_name
    third = ft_job(app_client, status=JobStatus.SUCCEEDED, fine_tuning=FT,
                   spec=JOB_SPEC | {"model": second_name})  # fmt: skip
    assert v1_job(alice, third)["fine_tuned_model"] == f"ft:builtin:tiny-chat:alice::{third}"
    nested = f"ft:{first_name}:ckpt-step-600:alice:from-ckpt:{second}"  # the old rule's name
    with session_scope(app_client.app.state.test_settings) as session:  # type: ignore[attr-defined]
        for name, job_id in ((second_name, second), (nested, second), (first_name, first)):
            found = fine_tuned.find(session, name, tenant="alice")
            assert found is not None and found[1].id == job_id, name
        assert fine_tuned.find(session, second_name, tenant="bob") is None


def test_metrics_events_carry_the_epoch_end_validation_loss(app_client: TestClient) -> None:
    """Epoch 1 ends at a logged step: its evaluation joins that step's event; epoch 2 ends at a
    step no record fell on: an event of its own, and a row of the results file."""
    settings = app_client.app.state.test_settings  # type: ignore[attr-defined]
    alice = sdk(app_client, "alice")
    job_id = ft_job(app_client, status=JobStatus.RUNNING, fine_tuning=FT)
    steps = [{"step": s, "train_loss": 1.0 / s, "train_mean_token_accuracy": 0.1 * s}
             for s in (2, 4, 6)]  # fmt: skip
    epochs = [{"epoch": 1, "optimizer_steps": 4, "train_loss": 0.6, "eval_loss": 0.5,
               "eval_mean_token_accuracy": 0.7},
              {"epoch": 2, "optimizer_steps": 7, "train_loss": 0.4, "eval_loss": 0.25,
               "eval_mean_token_accuracy": 0.8}]  # fmt: skip
    with session_scope(settings) as session:
        record_step_metrics(session, job_id=job_id, records=steps, metrics_events=True)
        session.commit()
        for record in epochs:
            record_epoch_metrics(session, job_id=job_id, record=record, metrics_events=True)
            session.commit()
    events = [
        e for e in alice.fine_tuning.jobs.list_events(job_id, limit=50) if e.type == "metrics"
    ]
    by_step = {e.data["step"]: e for e in events}  # type: ignore[index]
    assert sorted(by_step) == [2, 4, 6, 7]
    at_4 = by_step[4]
    assert at_4.data["train_loss"] == 0.25 and at_4.data["valid_loss"] == 0.5  # type: ignore[index]
    assert at_4.data["full_valid_loss"] == 0.5  # type: ignore[index]
    assert at_4.data["valid_mean_token_accuracy"] == 0.7  # type: ignore[index]
    assert at_4.message == (
        "Step 4: training loss=0.2500, validation loss=0.5000, full validation loss=0.5000"
    )
    assert by_step[2].data["valid_loss"] is None  # type: ignore[index]
    assert by_step[7].data["valid_loss"] == 0.25 and by_step[7].data["train_loss"] is None  # type: ignore[index]
    rows = {int(r["step"]): r for r in csv.DictReader(io.StringIO(results_csv(steps, epochs)))}
    assert sorted(rows) == [2, 4, 6, 7] and float(rows[7]["valid_loss"]) == 0.25


def test_checkpoint_metrics_carry_the_steps_token_accuracy(app_client: TestClient) -> None:
    settings = app_client.app.state.test_settings  # type: ignore[attr-defined]
    alice = sdk(app_client, "alice")
    job_id = ft_job(app_client, status=JobStatus.SUCCEEDED, fine_tuning=FT)
    folder = settings.jobs_dir / job_id / f"{CHECKPOINT_DIR}-5"
    folder.mkdir(parents=True)
    epoch = {"epoch": 1, "optimizer_steps": 5, "train_loss": 0.9, "eval_loss": 0.5,
             "eval_mean_token_accuracy": 0.6}  # fmt: skip
    state = {"global_step": 5, "epoch": 1, "metrics": [epoch]}
    (folder / CHECKPOINT_STATE).write_text(json.dumps(state))
    steps = [{"step": 4, "train_loss": 0.8, "train_mean_token_accuracy": 0.42},
             {"step": 6, "train_loss": 0.7, "train_mean_token_accuracy": 0.5}]  # fmt: skip
    with session_scope(settings) as session:
        record_step_metrics(session, job_id=job_id, records=steps, metrics_events=True)
        session.commit()
    (checkpoint,) = alice.fine_tuning.jobs.checkpoints.list(job_id).data
    metrics = checkpoint.metrics
    assert metrics.train_mean_token_accuracy == 0.42 and metrics.train_loss == 0.8  # step 4's
    assert metrics.valid_loss == 0.5 and metrics.full_valid_mean_token_accuracy == 0.6
