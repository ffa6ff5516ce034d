"""kill -9 in the middle of epoch 2, twice: once of the training process alone (its worker lives
on and hands the job on), once of the whole worker with its training process, like a container
killed outright, after which the worker is restarted. Each time the job resumes from its epoch-1
checkpoint on a second attempt and ends with the weights and metrics of an uninterrupted run."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.models import Job
from gradacc.settings import Settings
from tests.conftest import TINY
from tests.e2e.conftest import WorkerProcess, event_kinds, process_gone, wait_final, wait_for
from tests.trainer_core.helpers import final_weights, initial_weights, max_abs_diff, tolerance
from trainer_core.spec import JobSpec

pytestmark = pytest.mark.integration

SPEC = {**TINY, "max_train_samples": 2000, "num_train_epochs": 3, "seed": 5}  # 125 steps/epoch


def test_jobs_killed_mid_epoch_resume_and_match_a_clean_run(
    api: TestClient, start_worker: Callable[[str], WorkerProcess], pg_redis_settings: Settings
) -> None:
    settings = pg_redis_settings
    worker = start_worker("survivor")
    clean = wait_final(api, api.post("/v1/jobs", json=SPEC).json()["id"], timeout=120)
    assert clean["status"] == "succeeded", worker.log()
    reference = final_weights(settings.jobs_dir / clean["id"])
    bound = tolerance(initial_weights(JobSpec.model_validate(SPEC)), reference)

    # 1. The training process alone: the worker sees the SIGKILL and hands the job on.
    child_killed = api.post("/v1/jobs", json=SPEC).json()["id"]
    os.kill(pid_in_epoch_2(api, settings, child_killed), signal.SIGKILL)
    assert_resumed_like(api, settings, child_killed, clean, reference, bound)
    assert "killed" in event_kinds(api, child_killed)

    # 2. The whole worker at once, training process included; then the worker is restarted.
    worker_killed = api.post("/v1/jobs", json=SPEC).json()["id"]
    pid = pid_in_epoch_2(api, settings, worker_killed)
    os.kill(pid, signal.SIGKILL)  # first, so it cannot notice its worker's death and checkpoint
    worker.kill()
    assert process_gone(pid, timeout=5)
    restarted = start_worker("survivor")  # the same worker, back; it takes over the stale lease
    assert_resumed_like(api, settings, worker_killed, clean, reference, bound)
    assert "killed" not in event_kinds(api, worker_killed), restarted.log()  # nobody saw it die
    assert "requeued" in event_kinds(api, worker_killed)


def pid_in_epoch_2(api: TestClient, settings: Settings, job_id: str) -> int:
    wait_for(api, job_id, lambda job: job["progress"]["epoch"] >= 2, timeout=120)
    with session_scope(settings) as session:
        pid = session.scalar(select(Job.pid).where(Job.id == job_id))
    assert pid is not None
    return pid


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
    assert any("resumed at step 125" in e["message"] for e in events), events  # epoch 1's end
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
