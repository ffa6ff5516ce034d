"""What a worker takes for a message: the job it names if that one is running on a worker that
went silent (a take-over), else the best queued job it may start (``gradacc.scheduling.claim``). Then
the named job's message is accounted for, so that every queued job still has one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradacc.db import session_scope
from gradacc.jobs.states import claim_job
from gradacc.scheduling.claim import claim_next
from gradacc.scheduling.messages import forget_message, settle_message
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, utcnow

log = logging.getLogger(__name__)

CLAIM_TRIES = 3  # a claim that found nothing, while a job it could take was queued meanwhile


@dataclass(frozen=True)
class Taken:
    """The job claimed (None: nothing), and "throttled" when the named job waits for its
    tenant's running limit."""

    job_id: str | None
    note: str = ""


def take_for_message(
    settings: Settings, *, named: str, worker: str, send: Callable[[str], object]
) -> Taken:
    """Claim for the message that names ``named``; ``send(job_id)`` sends a job whose message is
    owed (``gradacc.scheduling.queue.send_or_leave``)."""
    with session_scope(settings) as session:
        if _take_over(session, named=named, worker=worker, settings=settings):
            return Taken(named)
        for tries_left in reversed(range(CLAIM_TRIES)):
            claimed = claim_next(session, worker=worker, settings=settings)
            settled = settle_message(
                session, named=named, claimed=claimed, settings=settings, may_retry=tries_left > 0
            )
            if settled.outcome != "retry":  # "retry": a job became claimable after the claim
                break
    if settled.outcome == "resend" and settled.job_id is not None:
        send(settled.job_id)
    if claimed is None:
        return Taken(None, "throttled" if settled.outcome == "waiting" else "")
    if claimed.job_id != named:
        log.info("the message of job %s started job %s (best first)", named, claimed.job_id)
    return Taken(claimed.job_id)


def _take_over(session: Session, *, named: str, worker: str, settings: Settings) -> bool:
    """A running job whose worker stopped beating (or let it go at shutdown) is taken over by a
    message that names it; such a job was started already, and goes on before any queued one."""
    if session.scalar(select(Job.status).where(Job.id == named)) != JobStatus.RUNNING:
        return False
    return claim_job(
        session,
        job_id=named,
        worker=worker,
        stale_before=utcnow() - timedelta(seconds=settings.stale_after_s),
        max_attempts=settings.max_attempts,
    )


def leave_for_others(settings: Settings, *, named: str) -> None:
    """A stopping worker takes nothing: a queued job it was sent waits for the reconciler."""
    with session_scope(settings) as session:
        forget_message(session, job_id=named, settings=settings)
