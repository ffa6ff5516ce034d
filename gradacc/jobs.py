"""The job state machine and the writes both the API and the worker make.

Every status change is one conditional UPDATE (``WHERE status IN <allowed sources>``), so two
processes racing on one job cannot both win: the loser sees rowcount 0.
"""

from __future__ import annotations

import re
import secrets
import time
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, delete, func, insert, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gradacc.errors import InvalidTransition, JobNotFound
from gradacc.models import (
    TERMINAL_STATUSES,
    EpochMetric,
    Job,
    JobEvent,
    JobStatus,
    StepMetric,
    utcnow,
)
from gradacc.webhooks import queue_webhook

S = JobStatus
ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED, S.FAILED, S.PAUSED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PAUSED}),
    # A paused job is resumed (queued again) or cancelled; one that reached its end while it
    # drained to the pause's checkpoint records that end.
    S.PAUSED: frozenset({S.QUEUED, S.CANCELLED, S.SUCCEEDED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


# "job_" + 12 hex digits of milliseconds + 8 random hex digits (see ``new_job_id``).
JOB_ID_PATTERN = r"^job_[0-9a-f]{20}$"


def new_job_id() -> str:
    return f"job_{int(time.time() * 1000):012x}{secrets.token_hex(4)}"


def is_job_id(value: str) -> bool:
    """Anything else names no job; it never reaches the database (PostgreSQL refuses NUL)."""
    return re.fullmatch(JOB_ID_PATTERN, value) is not None


def sources_of(target: JobStatus) -> list[str]:
    return [str(src) for src, targets in ALLOWED_TRANSITIONS.items() if target in targets]


def transition_job(
    session: Session, *, job_id: str, to: JobStatus, owned_by: str | None = None, **values: Any
) -> bool:
    """Move a job to ``to`` if its current status allows it (and, with ``owned_by``, only if that
    worker holds it); False if it did not. Does not commit."""
    stmt = update(Job).where(Job.id == job_id, Job.status.in_(sources_of(to)))
    if owned_by is not None:
        stmt = stmt.where(Job.worker == owned_by)
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


def require_transition(session: Session, *, job_id: str, to: JobStatus, **values: Any) -> None:
    """Like ``transition_job`` but raises ``JobNotFound`` / ``InvalidTransition`` when refused."""
    if transition_job(session, job_id=job_id, to=to, **values):
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


def claimed_values(worker: str, now: datetime) -> dict[str, Any]:
    """What a claim writes (a take-over's and the scheduler's): the job is this worker's and
    running from now; a preemption asked of an earlier holder no longer stands."""
    return {
        "status": str(S.RUNNING),
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
    best queued job instead (``gradacc.scheduling.claim_next``); this is the take-over's path.
    """
    now = utcnow()
    fresh = (Job.status == S.QUEUED) | (
        (Job.status == S.RUNNING) & (Job.heartbeat_at < stale_before)
    )
    stmt = (
        update(Job)
        .where(Job.id == job_id, fresh, failed_attempts() < max_attempts)
        .values(**claimed_values(worker, now))
    )
    claimed = session.execute(stmt).rowcount == 1  # type: ignore[attr-defined]
    session.commit()
    return bool(claimed)


def lock_tenant(session: Session, *, tenant: str) -> None:
    """PostgreSQL: serialise one tenant's creates and claims until commit, so that counting its
    queued or running jobs and then adding one is exact. (SQLite serialises writers anyway.)"""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(hashtext(:t))"), {"t": tenant})


def release_job(session: Session, *, job_id: str, worker: str) -> None:
    """The worker that claimed the job has let go of it: its training process is gone and its
    last rows are written, so a finished job may now be deleted (``may_delete``). Does not
    commit."""
    stmt = update(Job).where(Job.id == job_id, Job.worker == worker).values(released_at=utcnow())
    session.execute(stmt)


def held_by_worker(job: Job, *, stale_after_s: float, now: datetime | None = None) -> bool:
    """A worker claimed the job and has not let go yet, and its heartbeat says it is alive (a
    worker that died never lets go: after ``stale_after_s`` it is not waited for)."""
    if job.worker is None or job.released_at is not None or job.heartbeat_at is None:
        return False
    return job.heartbeat_at >= (now or utcnow()) - timedelta(seconds=stale_after_s)


def lock_job_stream(session: Session, *, job_id: str) -> None:
    """PostgreSQL: writers of one job's stream rows (events, step and epoch records) take turns
    until commit, so that the ids of a job's rows follow their commit order. The stream's cursor
    is the last id sent (``api.stream_reads``): a row that got a lower id but committed after a
    higher one would otherwise never be sent. (SQLite has one writer at a time anyway.)"""
    if session.get_bind().dialect.name == "postgresql":
        key = text("SELECT pg_advisory_xact_lock(hashtext('gradacc-stream'), hashtext(:job))")
        # No autoflush: the lock needs no pending row written, and a row's own error (a POST's
        # idempotency race on the job it adds) belongs to the caller's commit, not to here.
        with session.no_autoflush:
            session.execute(key, {"job": job_id})


def add_event(
    session: Session,
    *,
    job_id: str,
    kind: str,
    message: str,
    at: datetime | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    lock_job_stream(session, job_id=job_id)
    moment = at or utcnow()
    session.add(JobEvent(job_id=job_id, kind=kind, message=message, created_at=moment, data=data))


METRICS_EVENT = "metrics"  # the fine-tuning API's metrics events; /v1/jobs leaves them out
# step record key -> the fine-tuning API's name for it
METRICS_EVENT_KEYS = {
    "step": "step",
    "train_loss": "train_loss",
    "eval_loss": "valid_loss",
    "train_mean_token_accuracy": "train_mean_token_accuracy",
    "eval_mean_token_accuracy": "valid_mean_token_accuracy",
}


def _metrics_event(session: Session, *, job_id: str, record: dict[str, Any]) -> None:
    data = {name: record.get(key) for key, name in METRICS_EVENT_KEYS.items()}
    message = f"Step {data['step']}: training loss={_short(data['train_loss'])}"
    add_event(session, job_id=job_id, kind=METRICS_EVENT, message=message, data=data)


def _short(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.4f}"


def record_epoch_metrics(session: Session, *, job_id: str, record: dict[str, Any]) -> None:
    """Insert one epoch's record, or replace it: (job, epoch) is unique, a rewrite never doubles."""
    lock_job_stream(session, job_id=job_id)
    values = {
        "job_id": job_id,
        "epoch": int(record["epoch"]),
        "train_loss": _float_or_none(record.get("train_loss")),
        "eval_loss": _float_or_none(record.get("eval_loss")),
        "record": record,
        "created_at": utcnow(),
    }
    dialect = session.get_bind().dialect.name
    module: Any = postgresql if dialect == "postgresql" else sqlite
    if dialect not in ("postgresql", "sqlite"):
        session.execute(insert(EpochMetric).values(**values))
        return
    stmt = module.insert(EpochMetric).values(**values)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["job_id", "epoch"],
            set_={k: stmt.excluded[k] for k in ("train_loss", "eval_loss", "record")},
        )
    )


def record_step_metrics(
    session: Session, *, job_id: str, records: list[dict[str, Any]], metrics_events: bool = False
) -> None:
    """Insert step records, or replace them: a run resumed from a checkpoint logs its steps
    after the checkpoint again, and (job, step) is unique. ``metrics_events``: a fine-tuning
    job's, which the fine-tuning API also lists as events."""
    if not records:
        return
    lock_job_stream(session, job_id=job_id)
    rows = [{"job_id": job_id, "step": int(r["step"]), "record": r, "created_at": utcnow()}
            for r in records]  # fmt: skip
    dialect = session.get_bind().dialect.name
    if dialect not in ("postgresql", "sqlite"):
        session.execute(insert(StepMetric), rows)
        return
    module: Any = postgresql if dialect == "postgresql" else sqlite
    stmt = module.insert(StepMetric).values(rows)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["job_id", "step"], set_={"record": stmt.excluded.record}
        )
    )
    if metrics_events:
        # Replaced like the records themselves: a resume's steps are never listed twice.
        steps = [row["step"] for row in rows]
        again = (JobEvent.job_id == job_id) & (JobEvent.kind == METRICS_EVENT)
        session.execute(
            delete(JobEvent).where(again, JobEvent.data["step"].as_integer().in_(steps))
        )
        for record in records:
            _metrics_event(session, job_id=job_id, record=record)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
