"""Pause and resume: a running job checkpoints at the next window boundary and lets go of its
device; resumed, it is queued again and goes on from that checkpoint, to the weights an
uninterrupted run reaches (the preemption resume)."""

from __future__ import annotations

from celery import Celery
from sqlalchemy.orm import Session

from api.services.jobs import enqueue, get_job
from api.services.limits import check_waiting_limit
from gradacc.errors import InvalidTransition
from gradacc.jobs.records import add_event
from gradacc.jobs.states import (
    held_by_worker,
    lock_tenant,
    request_resume,
    require_transition,
    resume_paused,
)
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus


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
    worker is still writing that checkpoint, the resume is recorded (event "resume_requested")
    and the worker queues the job again as it lets go. Over ``max_queued_per_tenant`` with the
    tenant's other waiting jobs: ``TooManyJobs``."""
    job = get_job(session, job_id=job_id, tenant=tenant)
    if job.status != JobStatus.PAUSED:
        raise InvalidTransition(job_id, job.status, str(JobStatus.QUEUED))
    lock_tenant(session, tenant=tenant)
    check_waiting_limit(session, tenant=tenant, settings=settings, besides=job_id)
    if held_by_worker(job, stale_after_s=settings.stale_after_s) and _recorded(session, job):
        return get_job(session, job_id=job_id, tenant=tenant)
    if not resume_paused(session, job_id=job_id):  # cancelled meanwhile
        session.refresh(job)
        raise InvalidTransition(job_id, job.status, str(JobStatus.QUEUED))
    session.commit()
    enqueue(session, job=job, celery=celery, settings=settings, processes=job.processes_per_machine)
    return get_job(session, job_id=job_id, tenant=tenant)


def _recorded(session: Session, job: Job) -> bool:
    """The resume is recorded for the worker to act on as it lets go (committed); False when it
    let go meanwhile."""
    if job.resume_requested_at is not None:
        return True  # asked already
    if not request_resume(session, job_id=job.id):
        return False
    message = "resume requested: queued again once its worker has let go"
    add_event(session, job_id=job.id, kind="resume_requested", message=message)
    session.commit()
    return True
