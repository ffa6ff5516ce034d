"""Use cases of the API: keyword-only, verb-first, one commit each. No HTTP in here."""

from __future__ import annotations

import logging

from celery import Celery
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from gradacc.errors import JobNotFound, NotReady
from gradacc.jobs import add_event, new_job_id, require_transition
from gradacc.models import EpochMetric, Job, JobEvent, JobStatus, utcnow
from gradacc.settings import Settings
from trainer_core.spec import JobSpec
from worker.celery_app import enqueue_job

log = logging.getLogger(__name__)


def create_job(session: Session, *, spec: JobSpec, celery: Celery, settings: Settings) -> Job:
    """Commit the job as queued, then enqueue it. A failed enqueue leaves it for the reconciler."""
    job = Job(
        id=new_job_id(),
        status=JobStatus.QUEUED,
        spec=spec.model_dump(mode="json"),
        effective_batch_size=spec.effective_batch_size,
        enqueued_at=utcnow(),
    )
    session.add(job)
    add_event(session, job_id=job.id, kind="queued", message="job created")
    session.commit()
    try:
        enqueue_job(celery, settings, job.id)
    except Exception as exc:  # the broker is down: the row is safe, the reconciler retries
        log.warning("enqueue of %s failed (%s); the reconciler will retry", job.id, exc)
        job.enqueued_at = None
        add_event(session, job_id=job.id, kind="enqueue_failed", message=type(exc).__name__)
        session.commit()
    return job


def get_job(session: Session, *, job_id: str) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise JobNotFound(job_id)
    return job


def list_jobs(
    session: Session, *, status: JobStatus | None, limit: int, after: str | None
) -> tuple[list[Job], bool]:
    """Newest first; keyset pagination on the time-ordered id. Returns (page, has_more)."""
    query = select(Job).order_by(Job.id.desc()).limit(limit + 1)
    if status is not None:
        query = query.where(Job.status == status)
    if after is not None:
        query = query.where(Job.id < after)
    jobs = list(session.scalars(query))
    return jobs[:limit], len(jobs) > limit


def list_metrics(session: Session, *, job_id: str) -> list[EpochMetric]:
    get_job(session, job_id=job_id)
    query = select(EpochMetric).where(EpochMetric.job_id == job_id).order_by(EpochMetric.epoch)
    return list(session.scalars(query))


def list_events(session: Session, *, job_id: str) -> list[JobEvent]:
    get_job(session, job_id=job_id)
    query = select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
    return list(session.scalars(query))


def cancel_job(session: Session, *, job_id: str) -> Job:
    """Queued: cancelled at once. Running: cancelled now; its worker kills the process group
    within a second. Finished: refused (``InvalidTransition``)."""
    require_transition(session, job_id=job_id, to=JobStatus.CANCELLED, finished_at=utcnow())
    add_event(session, job_id=job_id, kind="cancelled", message="cancelled by request")
    session.commit()
    return get_job(session, job_id=job_id)


def check_readiness(session: Session, *, celery: Celery) -> dict[str, str]:
    """Raise ``NotReady`` naming what cannot be reached: the database or the broker."""
    try:
        session.execute(text("SELECT 1"))
    except Exception as exc:
        raise NotReady(f"database unreachable: {type(exc).__name__}") from exc
    try:
        with celery.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        raise NotReady(f"broker unreachable: {type(exc).__name__}") from exc
    return {"database": "ok", "broker": "ok"}
