"""The worker checks a job's spec again before training: a local path outside its data roots
fails the job at once (no training process, no retry), on each database."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from gradacc.db import session_scope
from gradacc.jobs.records import add_event
from gradacc.jobs.states import claim_job
from gradacc.scheduling.claim import claim_next
from gradacc.settings import Settings, get_settings
from gradacc.tables import Job, JobEvent, JobStatus, utcnow
from tests.support import make_job
from worker.child.reporting import describe_error
from worker.consumer.reconciler import reconcile_jobs
from worker.consumer.tasks import handle_job


@pytest.fixture
def worker_settings(db_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """The task reads ``get_settings()`` as a worker would: point the environment at this db."""
    monkeypatch.setenv("GRADACC_HOME", str(db_settings.home))
    if db_settings.database_url:
        monkeypatch.setenv("GRADACC_DATABASE_URL", db_settings.database_url)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


def test_a_path_outside_the_roots_fails_before_training(
    worker_settings: Settings, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere.csv"
    outside.write_text("text,label\nhi,1\n")
    spec = {"model": "builtin:tiny-bert", "dataset": str(outside)}
    job_id = make_job(worker_settings, spec=spec)
    assert handle_job(job_id) == "failed"
    with session_scope(worker_settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.status, job.error_code, job.attempts) == ("failed", "invalid_request", 1)
        assert job.error_message is not None and "data roots" in job.error_message
        assert str(outside) not in job.error_message  # no filesystem layout in the message
        assert job.pid is None  # no training process was started
        kinds = session.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id)).all()
    assert list(kinds) == ["failed"]
    assert handle_job(job_id) == "skipped"  # a redelivery does not retry it


def test_a_tenant_at_its_running_limit_waits_queued(worker_settings: Settings) -> None:
    limit = worker_settings.max_running_per_tenant
    for _ in range(limit):
        make_job(worker_settings, tenant="busy", status=JobStatus.RUNNING, heartbeat_at=utcnow())
    waiting = make_job(worker_settings, tenant="busy")
    assert handle_job(waiting) == "throttled"
    assert handle_job(waiting) == "throttled"  # redelivered while still busy: one event only
    with session_scope(worker_settings) as session:
        job = session.get(Job, waiting)
        assert job is not None and (job.status, job.attempts, job.enqueued_at) == (
            "queued",
            0,
            None,
        )
        kinds = session.scalars(select(JobEvent.kind).where(JobEvent.job_id == waiting)).all()
        assert list(kinds) == ["throttled"]
    other = make_job(worker_settings, tenant="idle")  # younger, of a tenant with room: it goes
    with session_scope(worker_settings) as session:
        claimed = claim_next(session, worker="w", settings=worker_settings)
    assert claimed is not None and claimed.job_id == other
    sent: list[str] = []
    reconcile_jobs(worker_settings, enqueue=sent.append)
    assert waiting in sent  # the reconciler sends it again; it runs once the tenant has room


def test_error_messages_carry_no_credentials_or_keys() -> None:
    exc = RuntimeError("cannot reach postgresql+psycopg://gradacc:hunter2@db/x as gak_Abc-123_x")
    message = describe_error(exc)
    assert "hunter2" not in message and "gak_Abc" not in message
    assert message == "RuntimeError: cannot reach postgresql+psycopg://***@db/x as gak_***"
    assert len(describe_error(RuntimeError("x" * 10_000))) == 2000


def test_preemptions_do_not_use_up_attempts(worker_settings: Settings) -> None:
    """Three graceful preemptions (checkpoint kept) and a lost worker: still resumable with
    max_attempts 3; one more lost worker and it fails."""
    old = utcnow() - timedelta(hours=1)
    job_id = make_job(
        worker_settings, status=JobStatus.RUNNING, heartbeat_at=old, enqueued_at=old, attempts=4
    )
    with session_scope(worker_settings) as session:
        for _ in range(3):
            add_event(session, job_id=job_id, kind="preempted", message="checkpoint kept")
        session.commit()
    sent: list[str] = []
    report = reconcile_jobs(worker_settings, enqueue=sent.append)
    assert report.failed == [] and sent == [job_id]
    with session_scope(worker_settings) as session:
        claim = {"job_id": job_id, "stale_before": utcnow(), "max_attempts": 3}
        assert claim_job(session, worker="w", **claim)  # attempt 5, failure 2
        session.execute(update(Job).where(Job.id == job_id).values(heartbeat_at=old))
        session.commit()
    assert reconcile_jobs(worker_settings, enqueue=sent.append).failed == []
    with session_scope(worker_settings) as session:
        assert claim_job(session, worker="w", **claim)  # attempt 6, failure 3
        session.execute(update(Job).where(Job.id == job_id).values(heartbeat_at=old))
        session.commit()
        assert not claim_job(session, worker="x", **claim)
    assert reconcile_jobs(worker_settings, enqueue=sent.append).failed == [job_id]
