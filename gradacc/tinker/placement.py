"""Where a Tinker session's models live: on a worker that claimed the session's host job.

A host job is a row of the jobs table of kind ``tinker`` (the session's ranks as its devices,
its priority, its tenant): the scheduler claims it like any job (priority, then fair share between tenants,
each tenant's running limit; ``gradacc.scheduling.claim``), its executor starts it, and its
supervisor beats its heartbeat, preempts it and hands it on. Its process is the Tinker host
(``worker.tinker.host``) for that session's models only.

- ``ensure_host``: a request waits and no host holds its model: the session gets a queued host
  job unless it has one queued or running (the API calls it from ``retrieve_future``; the caller
  sends the job's message).
- ``end_hosting``: the host has had nothing to answer for a while and has parked its models
  (swapped to disk, ``TinkerModel.parked``): its job succeeds, in one statement that checks
  that no request of the session's waits, so a request that came meanwhile keeps it running.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from gradacc.jobs.records import add_event
from gradacc.jobs.states import new_job, transition_job
from gradacc.tables import Job, JobStatus, utcnow
from gradacc.tinker import queue
from gradacc.tinker.tables import TinkerModel, TinkerRequest, TinkerSession

KIND = "tinker"
LIVE = (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.PAUSED)


def ensure_host(session: Session, session_id: str) -> str | None:
    """The id of a host job made for the session now (its message is the caller's to send), or
    None: it has a live one, or it has finished. Commits. Two callers at once: one job (the
    session's ``job_id`` is swapped only from the value read)."""
    owner = session.get(TinkerSession, session_id)
    if owner is None or owner.finished_at is not None:
        return None
    seen = owner.job_id
    if seen is not None:
        status = session.scalar(select(Job.status).where(Job.id == seen))
        if status in LIVE:
            return None
    job = new_job(
        tenant=owner.tenant,
        kind=KIND,
        spec={"tinker_session": owner.id},
        effective_batch_size=1,
        priority=owner.priority,
        num_processes=owner.ranks,
        enqueued_at=utcnow(),
    )
    swap = update(TinkerSession).where(TinkerSession.id == owner.id)
    swap = swap.where(TinkerSession.job_id == seen if seen else TinkerSession.job_id.is_(None))
    if session.execute(swap.values(job_id=job.id)).rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()  # a concurrent caller made it
        return None
    session.add(job)
    add_event(session, job_id=job.id, kind="queued", message=f"Tinker session {owner.id}")
    session.commit()
    return job.id


def host_processes(session: Session, job_id: str) -> int | None:
    """A host job's processes (its ranks); None: not a host job."""
    job = session.get(Job, job_id)
    return job.num_processes if job is not None and job.kind == KIND else None


def session_of(session: Session, job_id: str) -> str | None:
    """The session a host job serves (None: not a host job)."""
    job = session.get(Job, job_id)
    if job is None or job.kind != KIND:
        return None
    return str(job.spec.get("tinker_session"))


def end_hosting(session: Session, *, job_id: str, session_id: str, worker: str) -> bool:
    """Succeed the host job unless a request of its session waits (then False: go on). Commits."""
    waiting = exists().where(
        TinkerRequest.status == "pending",
        TinkerRequest.model_id == TinkerModel.id,
        TinkerModel.session_id == session_id,
        TinkerModel.status == "active",
    )
    done = utcnow()
    moved = transition_job(
        session,
        job_id=job_id,
        to=JobStatus.SUCCEEDED,
        owned_by=worker,
        from_=[JobStatus.RUNNING],
        unless=waiting,
        finished_at=done,
    )
    if not moved:
        session.rollback()
        return False
    add_event(session, job_id=job_id, kind="succeeded", message="no call for a while: parked")
    session.commit()
    return True


def close_idle(session: Session, *, idle_s: float) -> list[str]:
    """Parked models with no request for ``idle_s`` closed; their files (for the caller to
    delete). Commits."""
    before = utcnow() - timedelta(seconds=idle_s)
    stale = (
        TinkerModel.status == "active",
        TinkerModel.parked.is_not(None),
        TinkerModel.seen_at < before,
        queue.unheld(utcnow()),
    )
    stmt = update(TinkerModel).where(*stale).values(status="closed")
    files = session.scalars(stmt.returning(TinkerModel.parked)).all()
    session.commit()
    return [str(file) for file in files]
