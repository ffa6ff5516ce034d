"""kill -9 of a job's training process in the middle of epoch 2: the job resumes from its epoch-1
checkpoint on the next attempt and ends with the metrics of an uninterrupted run."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.models import Job
from gradacc.settings import Settings
from tests.conftest import TINY
from tests.e2e.conftest import WorkerProcess, event_kinds, wait_final, wait_for

pytestmark = pytest.mark.integration

SPEC = {**TINY, "max_train_samples": 2000, "num_train_epochs": 3, "seed": 5}  # 125 steps/epoch


def test_a_killed_training_process_resumes_and_matches_a_clean_run(
    api: TestClient, start_worker: Callable[[str], WorkerProcess], pg_redis_settings: Settings
) -> None:
    worker = start_worker("survivor")
    clean = wait_final(api, api.post("/v1/jobs", json=SPEC).json()["id"], timeout=120)
    assert clean["status"] == "succeeded", worker.log()

    job_id = api.post("/v1/jobs", json=SPEC).json()["id"]
    wait_for(api, job_id, lambda job: job["progress"]["epoch"] >= 2, timeout=120)
    with session_scope(pg_redis_settings) as session:
        pid = session.scalar(select(Job.pid).where(Job.id == job_id))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the training process only: the worker lives on

    job = wait_final(api, job_id, timeout=120)
    assert (job["status"], job["attempts"]) == ("succeeded", 2), event_kinds(api, job_id)
    assert "killed" in event_kinds(api, job_id)
    resumed = api.get(f"/v1/jobs/{job_id}/metrics").json()["data"]
    reference = api.get(f"/v1/jobs/{clean['id']}/metrics").json()["data"]
    assert [m["epoch"] for m in resumed] == [1, 2, 3]
    for a, b in zip(resumed, reference, strict=True):
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-5)
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["optimizer_steps"] == b["optimizer_steps"]
