"""A dpo job's pair metrics reach OpenAI's surfaces (both databases, no worker): the worker's
records are stored as they come (JSON), and the metrics events, the checkpoints' metrics and the
results file show ``rewards/...`` and ``logps/...`` under OpenAI-style names; a supervised job's
surfaces are unchanged (no pair names at all)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from fastapi.testclient import TestClient

from gradacc.db import session_scope
from gradacc.jobs.records import record_epoch_metrics, record_step_metrics
from gradacc.openai.names import PAIR_METRICS, openai_metrics
from gradacc.openai.results import results_csv
from gradacc.tables import JobStatus
from tests.api.test_fine_tuning_api import sdk
from tests.api.test_job_surfaces import app_client, ft_job  # noqa: F401  (the fixture)
from trainer_core.spec.outputs import CHECKPOINT_DIR, CHECKPOINT_STATE

RESOLVED = {"n_epochs": 1, "batch_size": 4, "learning_rate_multiplier": 1.0}
FT = {"hyperparameters": RESOLVED, "training_file": "file-x",
      "method": {"type": "dpo", "dpo": {"hyperparameters": RESOLVED | {"beta": 0.1}}}}  # fmt: skip
SPEC = {"model": "builtin:tiny-chat", "dataset": "builtin:preference-arithmetic",
        "task": "causal-lm", "method": "dpo"}  # fmt: skip


def _pairs(prefix: str, accuracy: float) -> dict[str, float]:
    return {f"{prefix}rewards/chosen": 0.3, f"{prefix}rewards/rejected": -0.2,
            f"{prefix}rewards/margins": 0.5, f"{prefix}rewards/accuracies": accuracy,
            f"{prefix}logps/chosen": -9.0, f"{prefix}logps/rejected": -12.0}  # fmt: skip


STEPS = [{"step": 2, "train_loss": 0.69, **_pairs("", 0.25)},
         {"step": 4, "train_loss": 0.5, **_pairs("", 0.75)}]  # fmt: skip
EPOCH = {"epoch": 1, "optimizer_steps": 4, "train_loss": 0.6, "eval_loss": 0.55,
         **_pairs("", 0.5), **_pairs("eval_", 0.625)}  # fmt: skip


def test_the_names_are_the_cores() -> None:
    """One list (``trainer_core.spec.dpo``) for the core's meters and the API's names."""
    from trainer_core.loop.objectives.dpo import PAIR_METRICS as CORE  # torch: not in the API

    assert CORE is PAIR_METRICS


def test_a_dpo_jobs_events_checkpoints_and_results_carry_the_pair_metrics(
    app_client: TestClient,  # noqa: F811
) -> None:
    settings = app_client.app.state.test_settings  # type: ignore[attr-defined]
    alice = sdk(app_client, "alice")
    job_id = ft_job(app_client, status=JobStatus.SUCCEEDED, fine_tuning=FT, spec=SPEC)
    with session_scope(settings) as session:
        record_step_metrics(session, job_id=job_id, records=STEPS, metrics_events=True)
        record_epoch_metrics(session, job_id=job_id, record=EPOCH, metrics_events=True)
        session.commit()
    events = [e for e in alice.fine_tuning.jobs.list_events(job_id) if e.type == "metrics"]
    by_step: dict[int, Any] = {e.data["step"]: e for e in events}  # type: ignore[index]
    assert sorted(by_step) == [2, 4]
    assert by_step[2].data["train_rewards_accuracies"] == 0.25
    assert by_step[2].message.endswith("reward accuracy=0.2500")
    at_4 = by_step[4].data
    assert at_4["train_rewards_accuracies"] == 0.75 and at_4["train_logps_rejected"] == -12.0
    assert at_4["valid_rewards_accuracies"] == 0.625 and at_4["valid_loss"] == 0.55
    assert "valid_rewards_margins" not in by_step[2].data  # no evaluation at step 2
    # A checkpoint at step 4: the step's training figures, the epoch's evaluation.
    folder = settings.jobs_dir / job_id / f"{CHECKPOINT_DIR}-4"
    folder.mkdir(parents=True)
    (folder / CHECKPOINT_STATE).write_text(json.dumps({"global_step": 4, "metrics": [EPOCH]}))
    (checkpoint,) = alice.fine_tuning.jobs.checkpoints.list(job_id).data
    metrics = checkpoint.metrics.model_dump()
    assert metrics["train_rewards_accuracies"] == 0.75 and metrics["train_loss"] == 0.5
    assert metrics["valid_rewards_accuracies"] == 0.625 and metrics["full_valid_loss"] == 0.55
    rows = list(csv.DictReader(io.StringIO(results_csv(STEPS, [EPOCH]))))
    assert [float(r["train_rewards_accuracies"]) for r in rows] == [0.25, 0.75]
    assert [r["valid_rewards_margins"] for r in rows] == ["", "0.5"]


def test_a_supervised_jobs_surfaces_have_no_pair_names() -> None:
    steps = [{"step": 1, "train_loss": 1.0, "train_mean_token_accuracy": 0.5}]
    header = results_csv(steps, []).splitlines()[0]
    assert header == "step,train_loss,train_accuracy,valid_loss,valid_mean_token_accuracy"
    assert set(openai_metrics(steps[0])) == {
        "step", "train_loss", "valid_loss", "train_mean_token_accuracy",
        "valid_mean_token_accuracy",
    }  # fmt: skip
