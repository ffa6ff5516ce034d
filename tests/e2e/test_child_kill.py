"""kill -9 in the middle of epoch 2, twice: once of the training process alone (its worker lives
on and hands the job on), once of the whole worker with its training process, like a container
killed outright, after which the worker is restarted. Each time the job resumes from its epoch-1
checkpoint on a second attempt and ends with the weights and metrics of an uninterrupted run."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gradacc.settings import Settings
from tests.conftest import TINY
from tests.e2e.conftest import StartWorker, process_gone
from tests.support import Hold, checkpoint_at, event_kinds, wait_final
from tests.trainer_core.helpers import final_weights, initial_weights, max_abs_diff, tolerance
from trainer_core.spec.job import JobSpec

pytestmark = pytest.mark.integration

# 10 steps an epoch: enough for a kill between two checkpoints (the hold places it; the length
# of an epoch is not the point, and every run here trains it three or four times over).
SPEC = {**TINY, "max_train_samples": 160, "num_train_epochs": 3, "seed": 5}
EPOCH = 10  # optimizer steps of one epoch: 160 rows / (8 x K 2)
HELD_AT = EPOCH + 3  # in epoch 2, after epoch 1's checkpoint


def test_jobs_killed_mid_epoch_resume_and_match_a_clean_run(
    api: TestClient, start_worker: StartWorker, pg_redis_settings: Settings
) -> None:
    settings = pg_redis_settings
    # Each victim is held in epoch 2 after epoch 1's checkpoint: killed there, it cannot have
    # finished first. The clean run passes the step unheld.
    hold = Hold(settings.home, HELD_AT, armed=False)
    worker = start_worker("survivor", hold.env())
    clean = wait_final(api, api.post("/v1/jobs", json=SPEC).json()["id"], timeout=120)
    assert clean["status"] == "succeeded", worker.log()
    reference = final_weights(settings.jobs_dir / clean["id"])
    bound = tolerance(initial_weights(JobSpec.model_validate(SPEC)), reference)

    # 1. The training process alone: the worker sees the SIGKILL and hands the job on.
    hold.arm()
    child_killed = api.post("/v1/jobs", json=SPEC).json()["id"]
    pid = hold.held(timeout=120)
    checkpoint_at(settings.jobs_dir / child_killed, EPOCH)  # epoch 1's, written in the background
    os.kill(pid, signal.SIGKILL)
    hold.release()
    assert_resumed_like(api, settings, child_killed, clean, reference, bound)
    assert "restarted" in event_kinds(api, child_killed)

    # 3. With max_restarts 0 the same kill fails the job, naming the cause.
    hold.arm()
    no_restarts = api.post("/v1/jobs", json={**SPEC, "max_restarts": 0}).json()["id"]
    pid = hold.held(timeout=120)
    os.kill(pid, signal.SIGKILL)
    hold.release()
    failed = wait_final(api, no_restarts, timeout=60)
    assert failed["status"] == "failed", failed
    assert failed["error"]["code"] == "restarts_exhausted", failed["error"]
    assert "max_restarts=0" in failed["error"]["message"], failed["error"]
    assert "(1) training process killed by SIGKILL" in failed["error"]["message"], failed["error"]

    # 2. The whole worker at once, training process included; then the worker is restarted.
    hold.arm()
    worker_killed = api.post("/v1/jobs", json=SPEC).json()["id"]
    pid = hold.held(timeout=120)
    checkpoint_at(settings.jobs_dir / worker_killed, EPOCH)
    os.kill(pid, signal.SIGKILL)  # first, so it cannot notice its worker's death and checkpoint
    worker.kill()
    assert process_gone(pid, timeout=5)
    hold.release()
    restarted = start_worker("survivor", hold.env())  # back; it takes over the stale lease
    assert_resumed_like(api, settings, worker_killed, clean, reference, bound)
    assert "restarted" not in event_kinds(api, worker_killed), restarted.log()  # nobody saw it
    assert "requeued" in event_kinds(api, worker_killed)


def assert_resumed_like(
    api: TestClient,
    settings: Settings,
    job_id: str,
    clean: dict[str, Any],
    reference: dict[str, Any],
    bound: float,
) -> None:
    job = wait_final(api, job_id, timeout=120)
    events = api.get(f"/v1/jobs/{job_id}/events").json()["data"]
    assert (job["status"], job["attempts"]) == ("succeeded", 2), [e["kind"] for e in events]
    assert any(f"resumed at step {EPOCH}" in e["message"] for e in events), events  # epoch 1's end
    diff = max_abs_diff(final_weights(settings.jobs_dir / job_id), reference)
    assert diff <= bound, (diff, bound)
    resumed = api.get(f"/v1/jobs/{job_id}/metrics").json()["data"]
    clean_metrics = api.get(f"/v1/jobs/{clean['id']}/metrics").json()["data"]
    assert [m["epoch"] for m in resumed] == [1, 2, 3]
    for a, b in zip(resumed, clean_metrics, strict=True):
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-5)
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["optimizer_steps"] == b["optimizer_steps"]
    print(f"{job_id}: max |dW| vs clean run {diff:.2e} (bound {bound:.2e})")
