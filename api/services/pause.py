"""Pause and resume: a running job checkpoints at the next window boundary and lets go of its
device; resumed, it is queued again and goes on from that checkpoint, to the weights an
uninterrupted run reaches (the preemption resume)."""

from __future__ import annotations

from celery import Celery
from sqlalchemy.orm import Session

from api.services.jobs import enqueue, get_job
from gradacc.errors import JobBusy
from gradacc.jobs.records import add_event
from gradacc.jobs.states import held_by_worker, require_transition
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, utcnow


def pause_job(session: Session, *, job_id: str, tenant: str) -> Job:
    """Queued: paused at once (no worker will claim it). Running: its training process
    checkpoints at the next window boundary and exits, letting go of its device (event "paused"
    then). Anything else: ``InvalidTransition``."""
    was = get_job(session, job_id=job_id, tenant=tenant).status
    require_transition(session, job_id=job_id, to=JobStatus.PAUSED)
    if was == JobStatus.RUNNING:
        message = "pause requested: checkpoint at the next window boundary"
        add_event(session, job_id=job_id, kind="pausing", message=message)
    else:
        add_event(session, job_id=job_id, kind="paused", message="paused before it started")
    session.commit()
    return get_job(session, job_id=job_id, tenant=tenant)


def resume_job(
    session: Session, *, job_id: str, tenant: str, celery: Celery, settings: Settings
) -> Job:
    """A paused job is queued again; it goes on from the checkpoint the pause kept. While its
    worker is still writing that checkpoint: ``JobBusy`` (retry in a few seconds)."""
    job = get_job(session, job_id=job_id, tenant=tenant)
    if job.status == JobStatus.PAUSED and held_by_worker(job, stale_after_s=settings.stale_after_s):
        raise JobBusy(job_id, "pausing")
    require_transition(
        session, job_id=job_id, to=JobStatus.QUEUED, from_=[JobStatus.PAUSED], enqueued_at=utcnow()
    )
    add_event(session, job_id=job_id, kind="resumed", message="resumed: queued again")
    session.commit()
    enqueue(session, job=job, celery=celery, settings=settings, processes=job.processes_per_machine)
    return get_job(session, job_id=job_id, tenant=tenant)
