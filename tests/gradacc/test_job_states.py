"""The kernel's job state machine on both databases (``db_settings``: SQLite and PostgreSQL): the
allowed transitions, failing a job (one way, with its event), the idempotent claim, letting go of
a job, and the metrics upsert."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gradacc.db import session_scope
from gradacc.errors import InvalidTransition, JobNotFound
from gradacc.jobs.records import record_epoch_metrics
from gradacc.jobs.states import claim_job, fail_job, held_by_worker, release_job, require_transition
from gradacc.settings import Settings
from gradacc.tables import EpochMetric, Job, JobEvent, JobStatus, utcnow
from tests.support import make_job, status_of


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


def test_failing_a_job_is_one_write_with_its_event(db_settings: Settings) -> None:
    job_id = make_job(db_settings, status=JobStatus.RUNNING, worker="w1")
    with session_scope(db_settings) as session:
        assert not fail_job(session, job_id=job_id, code="x", message="y", owned_by="w2")
        assert fail_job(session, job_id=job_id, code="process_died", message="exit status 1")
        assert not fail_job(session, job_id=job_id, code="again", message="no")  # final now
        session.commit()
        job = session.get_one(Job, job_id)
        events = session.scalars(select(JobEvent.message).where(JobEvent.job_id == job_id)).all()
    assert (job.status, job.error_code, job.error_message) == (
        "failed",
        "process_died",
        "exit status 1",
    )
    assert job.finished_at is not None and events == ["process_died: exit status 1"]


def test_a_finished_job_is_held_until_its_worker_lets_go(db_settings: Settings) -> None:
    job_id = make_job(db_settings)
    long_ago = utcnow() - timedelta(hours=1)
    with session_scope(db_settings) as session:
        job = session.get_one(Job, job_id)
        assert not held_by_worker(job, stale_after_s=60)  # never claimed
        assert claim_job(session, job_id=job_id, worker="w", stale_before=long_ago, max_attempts=3)
        require_transition(session, job_id=job_id, to=JobStatus.CANCELLED)
        session.commit()
        session.refresh(job)
        assert held_by_worker(job, stale_after_s=60)  # cancelled, but its worker still stops it
        assert not held_by_worker(job, stale_after_s=60, now=utcnow() + timedelta(minutes=5))
        jobs_dir = db_settings.jobs_dir
        release_job(session, job_id=job_id, worker="someone else", jobs_dir=jobs_dir)
        session.commit()
        session.refresh(job)
        assert held_by_worker(job, stale_after_s=60) and job.outputs is None
        (jobs_dir / job_id / "model").mkdir(parents=True)
        (jobs_dir / job_id / "model" / "config.json").write_text("{}")
        (jobs_dir / job_id / "train.log").write_text("12345")
        release_job(session, job_id=job_id, worker="w", jobs_dir=jobs_dir)
        session.commit()
        session.refresh(job)
        assert not held_by_worker(job, stale_after_s=60)
        # What it leaves on disk is recorded as it lets go: a poll reads the row alone.
        assert job.outputs == {"model": 2, "train.log": 5}


def test_a_resumed_runs_step_records_replace_their_metrics_events(db_settings: Settings) -> None:
    """A resume logs the steps after its checkpoint again: the fine-tuning API's metrics events
    of those steps are replaced, as the step records are, never listed twice."""
    from gradacc.jobs.records import METRICS_EVENT, record_step_metrics

    job_id = make_job(db_settings)
    first = [{"step": s, "train_loss": 1.0 / s} for s in (1, 2, 3, 4)]
    again = [{"step": s, "train_loss": 2.0 / s} for s in (3, 4, 5)]
    with session_scope(db_settings) as session:
        for records in (first, again):
            record_step_metrics(session, job_id=job_id, records=records, metrics_events=True)
            session.commit()
        query = select(JobEvent.data).where(
            JobEvent.job_id == job_id, JobEvent.kind == METRICS_EVENT
        )
        events = [data for data in session.scalars(query.order_by(JobEvent.id))]
    assert [(e["step"], e["train_loss"]) for e in events] == [
        (1, 1.0), (2, 0.5), (3, 2 / 3), (4, 0.5), (5, 0.4),
    ]  # fmt: skip
