"""Capacity and the wall-clock limit with real workers on PostgreSQL + Redis. A job that must be
running when something happens is parked at the hold failpoint (``tests.support.Hold``): nothing
here races a job's length.

- A 2-process job POSTed while the only worker (2 devices) trains another job is accepted: the
  capacity check reads the workers table, where a busy worker is as live as an idle one (it used
  to ask Celery's broadcast, which a busy worker does not answer: 422 "the largest has 0").
- A job past ``GRADACC_MAX_JOB_SECONDS`` is stopped at a checkpoint and fails with
  ``time_limit``, naming the setting; its checkpoint is kept.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gradacc.settings import Settings
from tests.conftest import TINY
from tests.e2e.conftest import StartWorker
from tests.support import Hold, event_kinds, wait_final, wait_for
from trainer_core.spec.outputs import kept_checkpoints

pytestmark = pytest.mark.integration

TWO = {**TINY, "num_processes": 2, "per_device_train_batch_size": 4}


def test_a_busy_worker_still_counts_for_capacity(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker
) -> None:
    hold = Hold(pg_redis_settings.home / "busy", 1)
    start_worker("busy2", {"GRADACC_DEVICES": "2", **hold.env()})
    busy = api.post("/v1/jobs", json=TINY).json()["id"]
    hold.held(timeout=180)  # the only worker trains `busy` now
    accepted = api.post("/v1/jobs", json=TWO)
    assert accepted.status_code == 201, accepted.json()
    refused = api.post("/v1/jobs", json={**TWO, "num_processes": 4})  # more than it has
    assert refused.status_code == 422 and refused.json()["error"]["param"] == "num_processes"
    for job_id in (accepted.json()["id"], busy):
        assert api.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        assert wait_final(api, job_id, timeout=60)["status"] == "cancelled"


def test_a_job_past_its_time_limit_fails_with_its_checkpoint(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker
) -> None:
    hold = Hold(pg_redis_settings.home / "limit", 1)  # held past the limit: no race
    start_worker("limited", {"GRADACC_MAX_JOB_SECONDS": "2", **hold.env()})
    job_id = api.post("/v1/jobs", json=TINY).json()["id"]
    hold.held(timeout=180)
    wait_for(api, job_id, lambda _: "time_limit" in event_kinds(api, job_id), timeout=60)
    job = wait_final(api, job_id, timeout=60)  # the stop request ends the hold, at a checkpoint
    assert job["status"] == "failed", job
    assert job["error"]["code"] == "time_limit"
    assert "GRADACC_MAX_JOB_SECONDS" in job["error"]["message"]
    kept = kept_checkpoints(pg_redis_settings.jobs_dir / job_id)
    assert kept and kept[0][0] == 1, kept  # the step it was held at
