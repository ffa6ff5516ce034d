"""The per-tenant job limits a POST and a resume answer to (429 naming the setting)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gradacc.errors import TooManyJobs
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus


def check_job_limits(session: Session, *, tenant: str, settings: Settings) -> None:
    """429 when the tenant already runs ``max_running_per_tenant`` jobs or has
    ``max_queued_per_tenant`` waiting (queued or paused: a resume queues a paused job again).
    (Jobs accepted while it had free slots can still wait queued, throttled, if starting them
    would go over the running limit.)"""
    running = session.scalar(
        select(func.count()).where(Job.tenant == tenant, Job.status == JobStatus.RUNNING)
    )
    if (running or 0) >= settings.max_running_per_tenant:
        limit = settings.max_running_per_tenant
        raise TooManyJobs(
            f"{running} jobs already running (limit {limit}); retry when one ends",
            setting="GRADACC_MAX_RUNNING_PER_TENANT",
        )
    check_waiting_limit(session, tenant=tenant, settings=settings)


WAITING_STATUSES = (JobStatus.QUEUED, JobStatus.PAUSED)


def check_waiting_limit(
    session: Session, *, tenant: str, settings: Settings, besides: str | None = None
) -> None:
    """429 when the tenant has ``max_queued_per_tenant`` jobs queued or paused, ``besides`` the
    one about to be queued again. Call under ``lock_tenant``."""
    query = select(func.count()).where(Job.tenant == tenant, Job.status.in_(WAITING_STATUSES))
    if besides is not None:
        query = query.where(Job.id != besides)
    waiting = session.scalar(query) or 0
    if waiting >= settings.max_queued_per_tenant:
        limit = settings.max_queued_per_tenant
        raise TooManyJobs(
            f"{waiting} jobs already queued or paused (limit {limit}); retry later",
            setting="GRADACC_MAX_QUEUED_PER_TENANT",
        )
