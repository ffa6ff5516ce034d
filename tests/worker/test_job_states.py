"""The state machine, the idempotent claim, the metrics upsert and the reconciler, on both
databases (``db_settings``: SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from gradacc.db import session_scope
from gradacc.errors import InvalidTransition, JobNotFound
from gradacc.jobs import claim_job, new_job_id, record_epoch_metrics, require_transition
from gradacc.models import EpochMetric, Job, JobStatus, utcnow
from gradacc.queue import create_celery_app, enqueue_job
from gradacc.settings import Settings
from worker.consumer.reconciler import reconcile_jobs

SPEC: dict[str, Any] = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}


def make_job(settings: Settings, **values: Any) -> str:
    job_id = new_job_id()
    with session_scope(settings) as session:
        fields = {"status": JobStatus.QUEUED, "enqueued_at": utcnow(), "spec": SPEC} | values
        session.add(Job(id=job_id, effective_batch_size=8, **fields))
        session.commit()
    return job_id


def status_of(settings: Settings, job_id: str) -> str | None:
    with session_scope(settings) as session:
        return session.scalar(select(Job.status).where(Job.id == job_id))


def test_only_allowed_transitions_happen(db_settings: Settings) -> None:
    job_id = make_job(db_settings)
    with session_scope(db_settings) as session:
        with pytest.raises(InvalidTransition, match="queued; it cannot become succeeded"):
            require_transition(session, job_id=job_id, to=JobStatus.SUCCEEDED)
        require_transition(session, job_id=job_id, to=JobStatus.RUNNING)
        require_transition(session, job_id=job_id, to=JobStatus.SUCCEEDED)
        for target in (JobStatus.CANCELLED, JobStatus.FAILED, JobStatus.RUNNING):
            with pytest.raises(InvalidTransition):
                require_transition(session, job_id=job_id, to=target)
        with pytest.raises(JobNotFound):
            require_transition(session, job_id="job_missing", to=JobStatus.CANCELLED)
        session.commit()
    assert status_of(db_settings, job_id) == "succeeded"


def test_a_job_is_claimed_once_unless_its_worker_went_silent(db_settings: Settings) -> None:
    job_id = make_job(db_settings)
    long_ago = utcnow() - timedelta(hours=1)
    with session_scope(db_settings) as session:
        claim = {"job_id": job_id, "stale_before": long_ago, "max_attempts": 3}
        assert claim_job(session, worker="a", **claim)
        assert not claim_job(session, worker="b", **claim), "a second delivery must not run it"
        # Worker "a" stops beating: the job may be taken over, but only by one claimant.
        recent = {**claim, "stale_before": utcnow() + timedelta(seconds=1)}
        assert claim_job(session, worker="c", **recent)
        job = session.get(Job, job_id)
        assert job is not None
        session.refresh(job)
        assert (job.worker, job.attempts) == ("c", 2)
        assert not claim_job(session, worker="d", **{**recent, "max_attempts": 2})


def test_an_epoch_written_twice_is_one_row(db_settings: Settings) -> None:
    job_id = make_job(db_settings)
    with session_scope(db_settings) as session:
        record_epoch_metrics(session, job_id=job_id, record={"epoch": 1, "train_loss": 0.9})
        record_epoch_metrics(session, job_id=job_id, record={"epoch": 1, "train_loss": 0.7})
        record_epoch_metrics(session, job_id=job_id, record={"epoch": 2, "train_loss": 0.5})
        session.commit()
        rows = session.scalars(
            select(EpochMetric).where(EpochMetric.job_id == job_id).order_by(EpochMetric.epoch)
        ).all()
        assert [(r.epoch, r.train_loss, r.record["train_loss"]) for r in rows] == [
            (1, 0.7, 0.7),
            (2, 0.5, 0.5),
        ]
        count = select(func.count()).select_from(EpochMetric).where(EpochMetric.job_id == job_id)
        assert session.scalar(count) == 2


def test_the_reconciler_requeues_lost_jobs_and_fails_hopeless_ones(db_settings: Settings) -> None:
    old = utcnow() - timedelta(hours=1)
    fresh_queued = make_job(db_settings)
    lost_queued = make_job(db_settings, enqueued_at=old)
    never_sent = make_job(db_settings, enqueued_at=None)
    orphaned = make_job(
        db_settings, status=JobStatus.RUNNING, heartbeat_at=old, enqueued_at=old, attempts=1
    )
    hopeless = make_job(db_settings, status=JobStatus.RUNNING, heartbeat_at=old, attempts=3)
    beating = make_job(db_settings, status=JobStatus.RUNNING, heartbeat_at=utcnow(), attempts=1)
    celery = create_celery_app(db_settings)
    sent: list[str] = []

    def enqueue(job_id: str) -> None:
        enqueue_job(celery, db_settings, job_id)
        sent.append(job_id)

    report = reconcile_jobs(db_settings, enqueue=enqueue)
    assert sorted(report.requeued) == sorted([lost_queued, never_sent, orphaned])
    assert report.failed == [hopeless]
    assert status_of(db_settings, hopeless) == "failed"
    assert fresh_queued not in sent and beating not in sent
    queued_messages = list((db_settings.broker_dir / "queue").iterdir())
    assert len(queued_messages) == 3
    # Re-enqueued jobs got a fresh enqueue time: a second pass right after sends nothing.
    assert reconcile_jobs(db_settings, enqueue=enqueue).requeued == []
