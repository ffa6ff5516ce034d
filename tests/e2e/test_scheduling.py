"""Scheduling one server's devices with real workers: priority first, then tenants take turns
(one tenant's burst does not hold back another's first job), queue positions that count down,
preemption by priority on (the job resumes to the weights of a clean run) and off, and two
workers racing for one queue. Every job that must be running at a moment is parked at the hold
failpoint (``tests.support.Hold``), so nothing here races a job's length."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.main import create_app
from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job, JobEvent
from tests.conftest import TINY, migrate
from tests.e2e.conftest import NO_PREDICT, StartWorker, WorkerProcess
from tests.support import Hold, event_kinds, make_job, wait_final, wait_for, wait_until
from tests.trainer_core.helpers import final_weights, initial_weights, max_abs_diff, tolerance
from trainer_core.spec.job import JobSpec

pytestmark = pytest.mark.integration

SMALL = {**TINY, "max_train_samples": 32, "max_eval_samples": 16}  # two optimizer steps


def running_one(settings: Settings, ids: list[str]) -> str:
    """The one of ``ids`` that is running, once one is (one worker: at most one)."""

    def probe() -> str | None:
        with session_scope(settings) as session:
            query = select(Job.id).where(Job.id.in_(ids), Job.status == "running")
            return session.scalars(query).first()

    return wait_until(probe, timeout=120, what="a job running")


def test_priority_then_tenants_take_turns_and_positions_count_down(
    pg_redis_settings: Settings, start_worker: StartWorker, tmp_path: Path
) -> None:
    """One device: carol's urgent job first, then alice's first of ten, then bob's only one,
    before alice's second and third. Each job is held running until cancelled, and meanwhile
    every waiting job's position is exactly where it stands."""
    settings = pg_redis_settings.model_copy(update={"require_auth": True})
    suffix = secrets.token_hex(3)  # tenants of this run only: no earlier turns
    with session_scope(settings) as session:
        keys = {
            name: {"Authorization": f"Bearer {create_api_key(session, tenant=f'{name}-{suffix}')}"}
            for name in ("alice", "bob", "carol")
        }
    key_of: dict[str, dict[str, str]] = {}
    with TestClient(create_app(settings)) as api:

        def post(tenant: str, **extra: Any) -> str:
            job_id: str = api.post(
                "/v1/jobs", json={**SMALL, **extra}, headers=keys[tenant]
            ).json()["id"]
            key_of[job_id] = keys[tenant]
            return job_id

        alice = [post("alice", seed=s) for s in range(10)]
        bob = post("bob")
        urgent = post("carol", priority=5)
        order = [urgent, alice[0], bob, alice[1], alice[2], *alice[3:]]

        def position(job_id: str) -> int | None:
            value: int | None = api.get(f"/v1/jobs/{job_id}", headers=key_of[job_id]).json()[
                "queue_position"
            ]
            return value

        assert [position(j) for j in order] == list(range(1, len(order) + 1))
        hold = Hold(tmp_path / "hold", 1)  # every job parks after step 1 until cancelled
        start_worker("one-device", hold.env())
        started = []
        for n in range(4):
            job_id = running_one(settings, order)
            started.append(job_id)
            waiting = order[n + 1 : n + 4]
            assert [position(j) for j in waiting] == [1, 2, 3], (n, started)
            api.post(f"/v1/jobs/{job_id}/cancel", headers=key_of[job_id])
        assert started == order[:4]  # bob's first before alice's second and third
        for job_id in order[4:]:
            api.post(f"/v1/jobs/{job_id}/cancel", headers=key_of[job_id])
        hold.release()
        assert all(position(j) is None for j in order)


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[tuple[Settings, TestClient]]:
    """The embedded stack (SQLite, filesystem broker) under ``tmp_path``; the API in process."""
    settings = Settings(home=tmp_path / "home")
    settings.home.mkdir()
    migrate(settings.resolved_database_url())
    with TestClient(create_app(settings)) as api:
        yield settings, api


def messages_of(settings: Settings, job_id: str, kind: str) -> list[str]:
    with session_scope(settings) as session:
        query = select(JobEvent.message).where(JobEvent.job_id == job_id, JobEvent.kind == kind)
        return list(session.scalars(query))


def test_preemption_on_makes_way_and_the_job_resumes_exactly(
    embedded: tuple[Settings, TestClient], tmp_path: Path
) -> None:
    settings, api = embedded
    hold = Hold(tmp_path / "hold", 1)
    worker = WorkerProcess(
        settings, "preempting", hold.env() | {"GRADACC_PREEMPT": "true"} | NO_PREDICT
    )
    try:
        low = api.post("/v1/jobs", json=TINY).json()["id"]
        hold.held(timeout=120)
        urgent = api.post("/v1/jobs", json={**SMALL, "priority": 5}).json()["id"]
        # The low job checkpoints and goes back to the queue; the urgent one takes the device
        # (and parks at the hold too).
        wait_for(api, urgent, lambda job: job["status"] == "running", timeout=120)
        waiting = api.get(f"/v1/jobs/{low}").json()
        assert (waiting["status"], waiting["queue_position"]) == ("queued", 1), worker.log()
        assert any(urgent in m for m in messages_of(settings, low, "preempting"))
        assert messages_of(settings, low, "preempted") == [
            f"preempted by {urgent}: checkpoint kept"
        ]
        hold.release()
        done = {job_id: wait_final(api, job_id, 120) for job_id in (urgent, low)}
        assert [done[j]["status"] for j in (urgent, low)] == ["succeeded"] * 2, worker.log()
        assert done[low]["attempts"] == 2  # resumed once the urgent job had ended:
        assert done[low]["started_at"] >= done[urgent]["finished_at"]
        assert any("resumed at step 1" in m for m in messages_of(settings, low, "training"))
        clean = wait_final(api, api.post("/v1/jobs", json=TINY).json()["id"], 120)
    finally:
        worker.stop()
    reference = final_weights(settings.jobs_dir / clean["id"])
    bound = tolerance(initial_weights(JobSpec.model_validate(TINY)), reference)
    assert max_abs_diff(final_weights(settings.jobs_dir / low), reference) <= bound


def test_preemption_off_lets_the_running_job_finish(
    embedded: tuple[Settings, TestClient], tmp_path: Path
) -> None:
    settings, api = embedded
    hold = Hold(tmp_path / "hold", 1)
    # GRADACC_PREEMPT unset: off
    worker = WorkerProcess(settings, "patient", hold.env() | NO_PREDICT)
    try:
        low = api.post("/v1/jobs", json=SMALL).json()["id"]
        hold.held(timeout=120)
        urgent = api.post("/v1/jobs", json={**SMALL, "priority": 5}).json()["id"]
        for _ in range(2):  # two reconciler passes that began after the urgent job was queued
            marker = make_job(settings, enqueued_at=None)  # sent by the next pass
            wait_until(
                lambda m=marker: "requeued" in event_kinds(api, m), timeout=60, what="a pass"
            )
            api.post(f"/v1/jobs/{marker}/cancel")
        assert api.get(f"/v1/jobs/{low}").json()["status"] == "running"
        assert api.get(f"/v1/jobs/{urgent}").json()["queue_position"] == 1
        hold.release()
        done = {job_id: wait_final(api, job_id, 120) for job_id in (low, urgent)}
    finally:
        worker.stop()
    assert [done[j]["status"] for j in (low, urgent)] == ["succeeded"] * 2
    assert done[low]["attempts"] == 1 and done[low]["finished_at"] <= done[urgent]["started_at"]
    assert not {"preempting", "preempted"} & set(event_kinds(api, low))


def test_two_workers_racing_start_every_job_once(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker
) -> None:
    ids = [api.post("/v1/jobs", json={**SMALL, "seed": s}).json()["id"] for s in range(6)]
    # Racing to claim, not taking over: a heartbeat that a loaded machine delays past the test
    # stacks' 3 s staleness made the other worker take a live job over (a second attempt).
    patient = {"GRADACC_STALE_AFTER_S": "60"}
    start_worker("racer-1", patient)
    start_worker("racer-2", patient)
    jobs = [wait_final(api, job_id, 180) for job_id in ids]
    assert [(job["status"], job["attempts"]) for job in jobs] == [("succeeded", 1)] * 6
    assert all(event_kinds(api, job_id).count("started") == 1 for job_id in ids)
    workers = {messages_of(pg_redis_settings, j, "started")[0].split()[2] for j in ids}
    print("jobs per worker:", workers)
