"""Preemption by priority (``GRADACC_PREEMPT=true``): a queued job that no free worker can take
stops the lowest-priority running job of lower priority. That job checkpoints at its next window
boundary, is queued again, and later resumes from the checkpoint (the path a pause takes).

A reconciler pass decides (``preempt_for_waiting``); the victim's worker carries it out: its
supervisor sees ``preempted_by`` and signals the training process, then ``requeue_preempted``.
One preemption is in flight at a time, so a single waiting job never stops two.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import exists, select, text, update
from sqlalchemy.orm import Session, aliased

from gradacc.jobs.records import add_event
from gradacc.jobs.states import requeue_job
from gradacc.scheduling.order import candidates
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, Worker, utcnow

HELD = (JobStatus.RUNNING, JobStatus.PAUSED)  # a paused job's worker may still be draining it


@dataclass(frozen=True)
class Preemption:
    victim: str
    preemptor: str


def preempt_for_waiting(
    session: Session, *, settings: Settings, now: datetime | None = None
) -> Preemption | None:
    """Ask one running job to make way for the best waiting job, if that one has a higher
    priority and no free worker has the devices for it; None when nothing was asked. Commits."""
    if not _serialised(session) or _in_flight(session):
        session.rollback()
        return None
    workers = _alive_workers(session, settings=settings, now=now or utcnow())
    if not workers:
        session.rollback()
        return None
    query = candidates(
        devices=max(workers.values()), max_running=settings.max_running_per_tenant
    ).limit(1)
    waiting = session.execute(query).one_or_none()
    busy = _busy_workers(session)
    free = [n for name, n in workers.items() if name not in busy]
    if waiting is None or any(n >= waiting.num_processes for n in free):
        session.rollback()
        return None
    able = [name for name, n in workers.items() if n >= waiting.num_processes]
    victim = session.execute(
        select(Job.id, Job.priority)
        .where(
            Job.status == JobStatus.RUNNING,
            Job.priority < waiting.priority,
            Job.preempted_by.is_(None),
            Job.worker.in_(able),
        )
        .order_by(Job.priority, Job.started_at.desc())  # the lowest; then the least work lost
        .limit(1)
    ).one_or_none()
    if victim is None or not _mark(session, victim=victim.id, preemptor=waiting.id):
        session.rollback()
        return None
    by = preemptor_shown(session, victim=victim.id, preemptor=waiting.id)
    if by == waiting.id:  # one tenant's jobs: its own ids and priorities
        by += f" (priority {waiting.priority} > {victim.priority})"
    message = f"preempted by {by}: checkpoint at the next window boundary, then queued again"
    add_event(session, job_id=victim.id, kind="preempting", message=message)
    session.commit()
    return Preemption(victim=victim.id, preemptor=waiting.id)


def _serialised(session: Session) -> bool:
    """PostgreSQL: one pass at a time across workers (a pass that finds another running skips
    this round). SQLite serialises writers, and ``_mark`` is one conditional write."""
    if session.get_bind().dialect.name != "postgresql":
        return True
    lock = text("SELECT pg_try_advisory_xact_lock(hashtext('gradacc-preempt'))")
    return bool(session.scalar(lock))


def _in_flight(session: Session) -> bool:
    asked = select(Job.id).where(Job.status == JobStatus.RUNNING, Job.preempted_by.is_not(None))
    return session.scalar(asked.limit(1)) is not None


def _alive_workers(session: Session, *, settings: Settings, now: datetime) -> dict[str, int]:
    since = now - timedelta(seconds=settings.worker_alive_s)
    rows = session.execute(
        select(Worker.name, Worker.num_devices).where(Worker.heartbeat_at >= since)
    )
    return {name: devices for name, devices in rows}


def _busy_workers(session: Session) -> set[str]:
    """Workers that hold a job: claimed (running) or still draining a pause."""
    held = Job.status.in_([str(s) for s in HELD]) & Job.released_at.is_(None)
    return {name for name in session.scalars(select(Job.worker).where(held)) if name}


def _mark(session: Session, *, victim: str, preemptor: str) -> bool:
    other = aliased(Job)
    none_asked = ~exists().where(other.status == JobStatus.RUNNING, other.preempted_by.is_not(None))
    stmt = (
        update(Job)
        .where(Job.id == victim, Job.status == JobStatus.RUNNING, none_asked)
        .values(preempted_by=preemptor)
        .execution_options(synchronize_session=False)
    )
    return bool(session.execute(stmt).rowcount == 1)  # type: ignore[attr-defined]


def requeue_preempted(session: Session, *, job_id: str, worker: str) -> str | None:
    """The victim's training process exited with its checkpoint: queue it again (the state
    machine's one running -> queued step, taken only by its own worker). Returns the preemptor,
    or None if the job was not preempted by priority (or is no longer this worker's). Does not
    commit."""
    preemptor = session.scalar(
        select(Job.preempted_by).where(
            Job.id == job_id, Job.status == JobStatus.RUNNING, Job.worker == worker
        )
    )
    if preemptor is None:
        return None
    if not requeue_job(session, job_id=job_id, worker=worker, preempted_by=None):
        return None
    by = preemptor_shown(session, victim=job_id, preemptor=preemptor)
    message = f"queued again after preemption by {by}; resumes from its checkpoint"
    add_event(session, job_id=job_id, kind="queued", message=message)
    return preemptor


ANOTHER_TENANTS = "a higher-priority job"


def preemptor_shown(session: Session, *, victim: str, preemptor: str) -> str:
    """How the victim's events name the job that preempts it: by its id when both jobs are one
    tenant's; a job of another tenant stays unnamed (its id is that tenant's to know)."""
    rows = session.execute(select(Job.id, Job.tenant).where(Job.id.in_([victim, preemptor])))
    tenants = {job_id: tenant for job_id, tenant in rows.all()}
    same = victim in tenants and tenants.get(victim) == tenants.get(preemptor)
    return preemptor if same else ANOTHER_TENANTS
