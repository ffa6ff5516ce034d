"""The job state machine: the one writer of ``jobs.status``.

Every status change is one conditional UPDATE (``WHERE status IN <allowed sources>``) built
here from ``ALLOWED_TRANSITIONS``, so two processes racing on one job cannot both win: the
loser sees rowcount 0. Three doors, all on the one table: ``transition_job`` (any allowed move,
``requeue_job`` being its running -> queued case), and ``claim_statement`` (queued -> running,
or a take-over of a running job whose worker went silent). ``tests/gradacc/test_status_writers.py``
fails when any other module writes a job's status.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Update, func, select, text, update
from sqlalchemy.orm import Session

from gradacc.errors import InvalidTransition, JobNotFound
from gradacc.ids import id_pattern, time_ordered_id
from gradacc.jobs.records import add_event
from gradacc.jobs.webhook_outbox import queue_webhook
from gradacc.outputs import outputs
from gradacc.tables import TERMINAL_STATUSES, Job, JobEvent, JobStatus, utcnow

S = JobStatus
ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED, S.FAILED, S.PAUSED}),
    # Back to queued only through ``requeue_job``: by its own worker, after a preemption by
    # priority or a gang that could not gather (the checkpoint is kept).
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PAUSED, S.QUEUED}),
    # A paused job is resumed (queued again) or cancelled; one that reached its end while it
    # drained to the pause's checkpoint records that end.
    S.PAUSED: frozenset({S.QUEUED, S.CANCELLED, S.SUCCEEDED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


JOB_ID_PATTERN = id_pattern("job_")


def new_job_id() -> str:
    return time_ordered_id("job_")


def new_job(**fields: Any) -> Job:
    """A new job's row: every job is born queued (its only status not written by a move)."""
    return Job(id=new_job_id(), status=str(S.QUEUED), **fields)


def is_job_id(value: str) -> bool:
    """Anything else names no job; it never reaches the database (PostgreSQL refuses NUL)."""
    return re.fullmatch(JOB_ID_PATTERN, value) is not None


def sources_of(target: JobStatus, from_: Collection[JobStatus] | None = None) -> list[str]:
    """The statuses a job may reach ``target`` from (narrowed to ``from_``, which must be
    allowed: a move the table does not list is a bug, not a race)."""
    allowed = [src for src, targets in ALLOWED_TRANSITIONS.items() if target in targets]
    if from_ is not None:
        if not set(from_) <= set(allowed):
            raise ValueError(f"{sorted(from_)} -> {target} is not in ALLOWED_TRANSITIONS")
        allowed = [src for src in allowed if src in from_]
    return [str(src) for src in allowed]


def transition_job(
    session: Session,
    *,
    job_id: str,
    to: JobStatus,
    owned_by: str | None = None,
    from_: Collection[JobStatus] | None = None,
    unless: ColumnElement[bool] | None = None,
    **values: Any,
) -> bool:
    """Move a job to ``to`` if its current status allows it (narrowed to ``from_``; with
    ``owned_by``, only if that worker holds it; with ``unless``, only if that is false, in the
    same statement); False if it did not. Does not commit."""
    stmt = update(Job).where(Job.id == job_id, Job.status.in_(sources_of(to, from_)))
    if owned_by is not None:
        stmt = stmt.where(Job.worker == owned_by)
    if unless is not None:
        stmt = stmt.where(~unless)
    stmt = stmt.values(status=str(to), updated_at=utcnow(), **values)
    moved = session.execute(stmt).rowcount == 1  # type: ignore[attr-defined]
    if moved and to in TERMINAL_STATUSES:
        queue_webhook(session, job_id=job_id, event=f"job.{to}")
    return bool(moved)


def fail_job(
    session: Session,
    *,
    job_id: str,
    code: str,
    message: str,
    owned_by: str | None = None,
    event: str | None = None,
) -> bool:
    """Mark the job failed with ``code`` and ``message``, and add its "failed" event (``event``,
    default "code: message"), if its status allows it (and, with ``owned_by``, only if that
    worker holds it); False if it did not move. Does not commit."""
    failed = transition_job(
        session,
        job_id=job_id,
        to=S.FAILED,
        owned_by=owned_by,
        finished_at=utcnow(),
        error_code=code,
        error_message=message,
    )
    if failed:
        add_event(session, job_id=job_id, kind="failed", message=event or f"{code}: {message}")
    return failed


def requeue_job(session: Session, *, job_id: str, worker: str, **values: Any) -> bool:
    """Running -> queued, by the worker that holds the job (its training process has exited
    with its checkpoint); False when it is not that worker's running job any more. Does not
    commit."""
    now = utcnow()
    values = {"pid": None, "enqueued_at": now, **values}
    return transition_job(
        session, job_id=job_id, to=S.QUEUED, from_=[S.RUNNING], owned_by=worker, **values
    )


def require_transition(
    session: Session,
    *,
    job_id: str,
    to: JobStatus,
    from_: Collection[JobStatus] | None = None,
    **values: Any,
) -> None:
    """Like ``transition_job`` but raises ``JobNotFound`` / ``InvalidTransition`` when refused."""
    if transition_job(session, job_id=job_id, to=to, from_=from_, **values):
        return
    current = session.scalar(select(Job.status).where(Job.id == job_id))
    if current is None:
        raise JobNotFound(job_id)
    raise InvalidTransition(job_id, current, str(to))


LIVE_STATUSES = (S.RUNNING, S.PAUSED)  # a paused job's process may still be draining to its pause


def update_running_job(session: Session, *, job_id: str, **values: Any) -> bool:
    """Write progress fields only while the job is still running, or pausing (never over a final
    status)."""
    stmt = update(Job).where(Job.id == job_id, Job.status.in_(LIVE_STATUSES)).values(**values)
    return session.execute(stmt).rowcount == 1  # type: ignore[attr-defined, no-any-return]


def claim_statement(worker: str, now: datetime, *, stale_before: datetime | None = None) -> Update:
    """The UPDATE of a claim (the scheduler's adds which job; a take-over's names it): queued ->
    running, or, with ``stale_before``, also a running job whose worker stopped beating before
    then. The job becomes this worker's and running from now; a preemption asked of an earlier
    holder no longer stands."""
    claimable: ColumnElement[bool] = Job.status.in_(sources_of(S.RUNNING))
    if stale_before is not None:
        claimable = claimable | ((Job.status == S.RUNNING) & (Job.heartbeat_at < stale_before))
    return (
        update(Job).where(claimable).values(status=str(S.RUNNING), **_claimed_values(worker, now))
    )


def _claimed_values(worker: str, now: datetime) -> dict[str, Any]:
    return {
        "attempts": Job.attempts + 1,
        "worker": worker,
        "released_at": None,
        "heartbeat_at": now,
        "started_at": now,
        "updated_at": now,
        "preempted_by": None,
    }


def failed_attempts() -> ColumnElement[int]:
    """Claims that did not end in a graceful preemption (a worker's SIGTERM: checkpoint kept,
    event "preempted"). Those are not failures: a job may be preempted any number of times,
    while ``max_attempts`` bounds the runs that died or lost their worker."""
    preemptions = (
        select(func.count())
        .where(JobEvent.job_id == Job.id, JobEvent.kind == "preempted")  # a pause's too
        .correlate(Job)
        .scalar_subquery()
    )
    return Job.attempts - preemptions


def claim_job(
    session: Session, *, job_id: str, worker: str, stale_before: datetime, max_attempts: int
) -> bool:
    """Take this very job: queued, or running with a worker that stopped beating (a take-over).
    Commits. Of two deliveries of one job, one claims it. A message for a queued job claims the
    best queued job instead (``gradacc.scheduling.claim.claim_next``); this is the take-over's path.
    """
    stmt = claim_statement(worker, utcnow(), stale_before=stale_before).where(
        Job.id == job_id, failed_attempts() < max_attempts
    )
    claimed = session.execute(stmt).rowcount == 1  # type: ignore[attr-defined]
    session.commit()
    return bool(claimed)


def lock_tenant(session: Session, *, tenant: str) -> None:
    """PostgreSQL: serialise one tenant's creates and claims until commit, so that counting its
    queued or running jobs and then adding one is exact. (SQLite serialises writers anyway.)"""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(hashtext(:t))"), {"t": tenant})


def release_job(session: Session, *, job_id: str, worker: str, jobs_dir: Path) -> bool:
    """The worker that claimed the job has let go of it: its training process is gone and its
    last rows are written, so a finished job may now be deleted (``may_delete``). Its outputs
    are what they will stay, and recorded as such. A paused job whose resume was asked while
    it let go (``request_resume``) is queued again now: True, and the caller sends its message.
    Does not commit."""
    values = {"released_at": utcnow(), "outputs": outputs(jobs_dir / job_id)}
    stmt = update(Job).where(Job.id == job_id, Job.worker == worker).values(**values)
    # One statement with the resume's conditional UPDATE: whichever comes second sees the other.
    asked = session.execute(stmt.returning(Job.resume_requested_at)).scalar_one_or_none()
    if asked is None:
        return False
    return resume_paused(session, job_id=job_id)


def resume_paused(session: Session, *, job_id: str) -> bool:
    """Paused -> queued (a resume), forgetting any resume asked earlier; False if it is not
    paused. Does not commit."""
    resumed = transition_job(
        session,
        job_id=job_id,
        to=S.QUEUED,
        from_=[S.PAUSED],
        enqueued_at=utcnow(),
        resume_requested_at=None,
    )
    if resumed:
        add_event(session, job_id=job_id, kind="resumed", message="resumed: queued again")
    return resumed


def request_resume(session: Session, *, job_id: str) -> bool:
    """Record a resume of a paused job that its worker has not let go of yet; False when it has
    let go meanwhile (or is no longer paused): then it is resumed at once instead. Does not
    commit."""
    stmt = update(Job).where(
        Job.id == job_id,
        Job.status == S.PAUSED,
        Job.worker.is_not(None),
        Job.released_at.is_(None),
    )
    return session.execute(stmt.values(resume_requested_at=utcnow())).rowcount == 1  # type: ignore[attr-defined, no-any-return]


def held_by_worker(job: Job, *, stale_after_s: float, now: datetime | None = None) -> bool:
    """A worker claimed the job and has not let go yet, and its heartbeat says it is alive (a
    worker that died never lets go: after ``stale_after_s`` it is not waited for)."""
    if job.worker is None or job.released_at is not None or job.heartbeat_at is None:
        return False
    return job.heartbeat_at >= (now or utcnow()) - timedelta(seconds=stale_after_s)
