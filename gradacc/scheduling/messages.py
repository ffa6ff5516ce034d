"""One message per queued job, when a message claims whichever job is best.

The invariant, per queue (``<queue>`` or ``<queue>.devices-n``, n the devices a job takes on each
machine: ``num_processes / num_machines``): the broker holds at least as
many messages as there are queued jobs with ``enqueued_at`` set; a queued job with ``enqueued_at``
NULL has none, and the reconciler's next pass sends it one. Messages are interchangeable (any of
them claims the best job), so what is kept is the count. A consumed message takes one from its
queue's count; ``settle_message`` gives it back:

- it claimed a job that had a message in this same queue: that message stands in for it;
- it claimed a job that had none, or one from another queue (a worker with more devices took a
  smaller job): one job of this queue that counted on a message is sent a new one now ("resend");
- it claimed nothing (every candidate's tenant is at its running limit): one such job has its
  ``enqueued_at`` cleared and waits, with a ``throttled`` event, for the reconciler ("waiting");
  but a job found here whose tenant is under its limit was queued (or its tenant let a job go)
  after the claim looked: the worker claims again ("retry") instead of charging that job.

The job chosen is the named one when it counted on a message, else the oldest queued job of the
queue that did. If the count was short all the same (a broker that lost messages), the
reconciler re-sends any job queued longer than ``requeue_after_s`` after its last send.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gradacc.jobs.records import add_event
from gradacc.scheduling.claim import Claimed
from gradacc.scheduling.order import running_count
from gradacc.scheduling.queue import job_queue
from gradacc.settings import Settings
from gradacc.tables import Job, JobEvent, JobStatus, processes_per_machine, utcnow


@dataclass(frozen=True)
class Settled:
    """What ``settle_message`` did, and the job it did it to ("resend": send it a message)."""

    outcome: Literal["settled", "inherited", "resend", "waiting", "retry"]
    job_id: str | None = None


def settle_message(
    session: Session,
    *,
    named: str,
    claimed: Claimed | None,
    settings: Settings,
    may_retry: bool = False,
) -> Settled:
    """Give the consumed message (which named ``named``) back to its queue's count. Commits.

    ``may_retry``: when nothing was claimed but the job it would take off the count may start
    now (its tenant is under its running limit: it was queued, or its tenant let a job go, after
    the claim looked), change nothing and answer "retry": the caller claims again."""
    if claimed is not None and claimed.job_id == named:
        return Settled("settled")
    row = session.execute(
        select(Job.status, Job.num_processes, Job.num_machines, Job.enqueued_at).where(
            Job.id == named
        )
    ).one_or_none()
    if row is None:
        return Settled("settled")  # deleted, so finished: its message was a spare one
    queue = job_queue(settings, processes_per_machine(row.num_processes, row.num_machines))
    same_queue = claimed is not None and job_queue(settings, claimed.node_processes) == queue
    if claimed is not None and claimed.had_message and same_queue:
        return Settled("inherited")
    named_queued = row.status == JobStatus.QUEUED
    counted = named if named_queued and row.enqueued_at is not None else None
    target = counted or _counting_on_one(session, settings=settings, queue=queue)
    if claimed is None:
        if may_retry and target and _under_limit(session, job_id=target, settings=settings):
            session.commit()
            return Settled("retry", target)
        cleared = _clear_one(session, first=target, settings=settings, queue=queue)
        for job_id in {job for job in (cleared, named if named_queued else None) if job}:
            _throttled(session, job_id=job_id, settings=settings)
        session.commit()
        return Settled("waiting" if cleared or named_queued else "settled", cleared)
    if target is None:
        return Settled("settled")
    sent = (Job.id == target) & (Job.status == JobStatus.QUEUED)
    session.execute(update(Job).where(sent).values(enqueued_at=utcnow()))
    session.commit()
    return Settled("resend", target)


def forget_message(session: Session, *, job_id: str, settings: Settings) -> None:
    """A message consumed by a worker that starts nothing (it is stopping): one job of its queue
    that counted on a message waits for the reconciler instead. Commits."""
    row = session.execute(
        select(Job.status, Job.num_processes, Job.num_machines, Job.enqueued_at).where(
            Job.id == job_id
        )
    ).one_or_none()
    if row is None:
        return
    target = job_id if row.status == JobStatus.QUEUED and row.enqueued_at is not None else None
    queue = job_queue(settings, processes_per_machine(row.num_processes, row.num_machines))
    target = target or _counting_on_one(session, settings=settings, queue=queue)
    if _clear_one(session, first=target, settings=settings, queue=queue) is not None:
        session.commit()


def _counting_on_one(session: Session, *, settings: Settings, queue: str) -> str | None:
    """The oldest queued job of ``queue`` that counts on a message."""
    processes = int(queue.rsplit("-", 1)[1]) if queue != settings.queue else 1
    # A job's queue is that of its devices on each machine (num_processes / num_machines).
    per_node = Job.num_machines * processes
    fits: Any = Job.num_processes <= per_node if processes == 1 else Job.num_processes == per_node
    query = select(Job.id).where(Job.status == JobStatus.QUEUED, Job.enqueued_at.is_not(None))
    return session.scalar(query.where(fits).order_by(Job.id).limit(1))


def _clear_one(
    session: Session, *, first: str | None, settings: Settings, queue: str
) -> str | None:
    """Take one from the queue's count: clear the ``enqueued_at`` of ``first`` or, when another
    worker claimed it meanwhile (the update then matches nothing, and the claim already took it
    from the count), of the next job still counting on a message. The job cleared, or None."""
    candidate, tried = first, set()
    while candidate is not None and candidate not in tried:
        tried.add(candidate)
        counting = (Job.id == candidate) & (Job.status == JobStatus.QUEUED)
        cleared = session.execute(
            update(Job).where(counting, Job.enqueued_at.is_not(None)).values(enqueued_at=None)
        )
        if cleared.rowcount == 1:  # type: ignore[attr-defined]
            return candidate
        candidate = _counting_on_one(session, settings=settings, queue=queue)
    return None


def _under_limit(session: Session, *, job_id: str, settings: Settings) -> bool:
    """The job's tenant runs fewer jobs than its limit: a claim may start the job now."""
    tenant = select(Job.tenant).where(Job.id == job_id).scalar_subquery()
    running = running_count(tenant)
    return int(session.scalar(running) or 0) < settings.max_running_per_tenant


def _throttled(session: Session, *, job_id: str, settings: Settings) -> None:
    """It waits for its tenant's running limit, with ``enqueued_at`` cleared; one event."""
    queued = (Job.id == job_id) & (Job.status == JobStatus.QUEUED)
    session.execute(update(Job).where(queued).values(enqueued_at=None))
    seen = select(JobEvent.id).where(JobEvent.job_id == job_id, JobEvent.kind == "throttled")
    if session.scalar(seen.limit(1)) is None:
        tenant = select(Job.tenant).where(Job.id == job_id).scalar_subquery()
        running = running_count(tenant)
        limit = settings.max_running_per_tenant
        message = f"waiting: tenant runs {session.scalar(running)} jobs (limit {limit})"
        add_event(session, job_id=job_id, kind="throttled", message=message)
