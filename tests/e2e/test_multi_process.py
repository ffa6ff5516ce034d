"""Multi-process jobs through the service on PostgreSQL + Redis: a 2-process job runs end to end on
a worker with 2 devices (2 gloo CPU processes here) under torchrun; cancel and preemption leave no
rank behind; a job no live worker can hold is refused at POST."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psutil
import pytest
from fastapi.testclient import TestClient

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus
from tests.conftest import TINY
from tests.e2e.conftest import StartWorker
from tests.support import Hold, event_kinds, wait_final, wait_until
from tests.trainer_core.helpers import Weights, final_weights, initial_weights, tolerance
from trainer_core.spec.job import JobSpec

pytestmark = pytest.mark.integration

TWO = {**TINY, "num_processes": 2, "per_device_train_batch_size": 4}  # effective batch 4·2·2
LONG = {**TWO, "num_train_epochs": 3}  # 12 steps; held, then stopped early


@pytest.fixture
def two_device_worker(start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch) -> StartWorker:
    monkeypatch.setenv("GRADACC_DEVICES", "2")  # read by the workers started here
    return start_worker


def post_when_accepted(api: TestClient, spec: dict[str, Any], timeout: float = 180) -> str:
    """POST until a worker that holds the job is live (registered: the capacity check)."""

    def accepted() -> str | None:
        response = api.post("/v1/jobs", json=spec)
        if response.status_code == 201:
            return str(response.json()["id"])
        assert response.status_code == 422, response.json()
        return None

    return wait_until(accepted, timeout=timeout, what="a worker that holds the job", every=0.5)


def clean_reference(
    api: TestClient, settings: Settings, spec: dict[str, Any], logs: Callable[[], list[str]]
) -> tuple[dict[str, Any], Weights, float]:
    """Run ``spec`` uninterrupted: the job, its final weights, and the bound a run that must
    equal it is held to (``tests.trainer_core.helpers.tolerance``)."""
    clean = wait_final(api, post_when_accepted(api, spec), timeout=240)
    assert clean["status"] == "succeeded", logs()
    reference = final_weights(settings.jobs_dir / clean["id"])
    return clean, reference, tolerance(initial_weights(JobSpec.model_validate(spec)), reference)


def rank_processes(job_id: str) -> list[psutil.Process]:
    """The job's torchrun agent and rank processes, wherever they are in the process tree."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if job_id in cmdline and any("worker.child.ranks.agent" in a or "worker.child.ranks.main" in a
                                     for a in cmdline):  # fmt: skip
            found.append(process)
    return found


def all_gone(processes: list[psutil.Process], timeout: float) -> bool:
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    return not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_refused_when_no_live_worker_holds_it(api: TestClient) -> None:
    response = api.post("/v1/jobs", json=TWO)
    assert response.status_code == 422
    assert response.json()["error"]["param"] == "num_processes"
    response = api.post("/v1/jobs", json={**TWO, "num_machines": 2})
    assert response.status_code == 422
    assert response.json()["error"]["param"] == "num_machines"


def test_two_process_jobs_end_to_end_on_two_workers(
    api: TestClient, pg_redis_settings: Settings, two_device_worker: StartWorker
) -> None:
    """Two 2-process jobs at once on two workers with 2 devices each: they spread, one per
    worker (each takes one job at a time), and each job's ranks train in one worker's set.

    Both are held at step 1 until both run: unheld, the first worker could finish the first
    job and take the second before the second worker was up (seen once, two suites at once)."""
    hold = Hold(pg_redis_settings.home / "spread", 1)
    workers = [two_device_worker(name, hold.env()) for name in ("gpus2x", "gpus2y")]
    job_ids = [post_when_accepted(api, TWO), post_when_accepted(api, {**TWO, "seed": 1})]
    hold.held(timeout=180)

    def both_running() -> bool:
        with session_scope(pg_redis_settings) as session:
            return all(session.get(Job, job_id).status == JobStatus.RUNNING for job_id in job_ids)  # type: ignore[union-attr]

    wait_until(both_running, timeout=180, what="both jobs running")
    hold.release()
    for job_id in job_ids:
        job = wait_final(api, job_id, timeout=240)
        assert job["status"] == "succeeded", (job, [w.log() for w in workers])
        assert job["effective_batch_size"] == 4 * 2 * 2
        metrics = api.get(f"/v1/jobs/{job_id}/metrics").json()["data"]
        assert [m["epoch"] for m in metrics] == [1]
        assert metrics[0]["train_samples"] == 64  # both ranks' rows, each once
        assert metrics[0]["optimizer_steps"] == 64 // (4 * 2 * 2)
    with session_scope(pg_redis_settings) as session:
        stored = [session.get(Job, job_id) for job_id in job_ids]
        assert all(job is not None and job.summary is not None for job in stored)
        # rank 0 trained in a world of 2, and the two jobs ran on different workers
        assert [job.summary["num_processes"] for job in stored if job and job.summary] == [2, 2]
        assert len({job.worker for job in stored if job}) == 2, [j.worker for j in stored if j]
    for job_id in job_ids:
        assert all_gone(rank_processes(job_id), timeout=30)  # they exit once rank 0 recorded it


def test_cancel_and_preemption_stop_every_rank(
    api: TestClient, pg_redis_settings: Settings, two_device_worker: StartWorker
) -> None:
    # Held at step 1 (then at step 2 after the resume): running on any machine when stopped.
    first_hold = Hold(pg_redis_settings.home / "first", 1)
    first = two_device_worker("gpus2a", first_hold.env())
    job_id = post_when_accepted(api, LONG)
    first_hold.held(timeout=180)
    ranks = rank_processes(job_id)
    assert len(ranks) == 3, ranks  # torchrun's agent and 2 ranks
    first.stop()  # warm shutdown: the job is preempted, checkpointed at a window's end
    assert all_gone(ranks, timeout=30), "a rank outlived its preempted job"
    assert "preempted" in event_kinds(api, job_id)

    second_hold = Hold(pg_redis_settings.home / "second", 2)
    two_device_worker("gpus2b", second_hold.env())  # resumes it from the checkpoint
    second_hold.held(timeout=180)
    ranks = rank_processes(job_id)
    assert len(ranks) == 3, ranks
    assert api.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert all_gone(ranks, timeout=15), "a rank outlived its cancelled job"
    assert wait_final(api, job_id, timeout=30)["status"] == "cancelled"
