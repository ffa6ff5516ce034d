"""Pause and resume on /v1/jobs and through the OpenAI SDK, in-process, on both databases (no
worker: a test plays the worker's part on the job's row). A resume that arrives while the
paused job's worker is still letting go is taken and acted on as it lets go; a resume or a POST
past ``max_queued_per_tenant`` (paused jobs count as waiting) is a 429 naming the setting.
The real worker's side, with training and weights, is tests/e2e/test_openai_sdk.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from api.main import create_app
from gradacc.db import session_scope
from gradacc.jobs.states import release_job
from gradacc.settings import Settings
from gradacc.tables import Job, JobEvent, utcnow
from tests.api.test_fine_tuning_api import chat_file, sdk
from tests.conftest import TINY

WORKER = "host:4242"


@pytest.fixture
def limited(db_settings: Settings) -> Iterator[TestClient]:
    settings = db_settings.model_copy(update={"max_queued_per_tenant": 2, "require_auth": True})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.app.state.test_settings = settings  # type: ignore[attr-defined]
        yield client


class Alice:
    """alice's calls on /v1/jobs, with her key."""

    def __init__(self, client: TestClient) -> None:
        self.client, self.sdk = client, sdk(client, "alice")
        self.headers = {"Authorization": f"Bearer {self.sdk.api_key}"}

    def post(self, path: str, **kwargs: object) -> Any:
        return self.client.post(f"/v1/jobs{path}", headers=self.headers, **kwargs)  # type: ignore[arg-type]

    def status(self, job_id: str) -> str:
        return str(self.client.get(f"/v1/jobs/{job_id}", headers=self.headers).json()["status"])


def claim_as_worker(settings: Settings, job_id: str) -> None:
    """What a worker's claim writes: running, held by it, beating now."""
    with session_scope(settings) as session:
        values = {"status": "running", "worker": WORKER, "heartbeat_at": utcnow(),
                  "released_at": None}  # fmt: skip
        session.execute(update(Job).where(Job.id == job_id).values(**values))
        session.commit()


def let_go(settings: Settings, job_id: str) -> bool:
    """What the worker does once the paused job's process has exited."""
    with session_scope(settings) as session:
        queued = release_job(session, job_id=job_id, worker=WORKER, jobs_dir=settings.jobs_dir)
        session.commit()
        return queued


def event_kinds(settings: Settings, job_id: str) -> list[str]:
    with session_scope(settings) as session:
        query = select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
        return list(session.scalars(query))


def test_a_resume_while_the_worker_lets_go_is_taken_and_acted_on(limited: TestClient) -> None:
    settings: Settings = limited.app.state.test_settings  # type: ignore[attr-defined]
    me = Alice(limited)
    alice = me.sdk
    job = alice.fine_tuning.jobs.create(
        model="builtin:tiny-chat", training_file=chat_file(alice).id
    )
    claim_as_worker(settings, job.id)
    assert alice.fine_tuning.jobs.pause(job.id).status == "paused"
    # Its worker has not let go yet (the process is writing its checkpoint): taken, not a 409.
    assert alice.fine_tuning.jobs.resume(job.id).status == "paused"
    assert alice.fine_tuning.jobs.resume(job.id).status == "paused"  # asked twice: once
    assert event_kinds(settings, job.id).count("resume_requested") == 1
    assert let_go(settings, job.id)  # the worker queues it again as it lets go
    assert alice.fine_tuning.jobs.retrieve(job.id).status == "queued"
    assert event_kinds(settings, job.id)[-2:] == ["resume_requested", "resumed"]
    with session_scope(settings) as session:
        assert session.get_one(Job, job.id).resume_requested_at is None
    # Paused and let go before the resume: queued at once, and the next release acts on nothing.
    claim_as_worker(settings, job.id)
    assert me.post(f"/{job.id}/pause").json()["status"] == "paused"
    assert not let_go(settings, job.id)
    assert me.post(f"/{job.id}/resume").json()["status"] == "queued"
    with pytest.raises(openai.ConflictError):  # not paused any more
        alice.fine_tuning.jobs.resume(job.id)


def test_a_resume_asked_before_a_cancel_does_not_queue_it(limited: TestClient) -> None:
    settings: Settings = limited.app.state.test_settings  # type: ignore[attr-defined]
    me = Alice(limited)
    job_id = me.post("", json=TINY).json()["id"]
    claim_as_worker(settings, job_id)
    me.post(f"/{job_id}/pause")
    assert me.post(f"/{job_id}/resume").json()["status"] == "paused"
    assert me.post(f"/{job_id}/cancel").json()["status"] == "cancelled"
    assert not let_go(settings, job_id)
    assert me.status(job_id) == "cancelled"


def test_paused_jobs_count_toward_the_queued_limit(limited: TestClient) -> None:
    settings: Settings = limited.app.state.test_settings  # type: ignore[attr-defined]
    me = Alice(limited)
    first, second = (me.post("", json=TINY).json()["id"] for _ in range(2))
    # Paused while queued: it still waits, so it still counts.
    assert me.post(f"/{first}/pause").json()["status"] == "paused"
    refused = me.post("", json=TINY)
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "too_many_jobs" and error["param"] == "GRADACC_MAX_QUEUED_PER_TENANT"
    assert "2 jobs already queued or paused (limit 2)" in error["message"]
    assert me.post(f"/{first}/resume").json()["status"] == "queued"  # still 2 waiting
    # A running job paused: the queue filled meanwhile, so its resume would make a third.
    claim_as_worker(settings, first)
    third = me.post("", json=TINY)
    assert third.status_code == 201, third.text
    me.post(f"/{first}/pause")
    let_go(settings, first)
    refused = me.post(f"/{first}/resume")
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["param"] == "GRADACC_MAX_QUEUED_PER_TENANT"
    assert me.status(first) == "paused"
    me.post(f"/{second}/cancel")
    assert me.post(f"/{first}/resume").json()["status"] == "queued"
