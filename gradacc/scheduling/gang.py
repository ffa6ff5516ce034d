"""Gang admission: a job over M machines holds W/M devices on each of M distinct machines at once
(``gang_slots``), and starts only when every slot is held (docs/scheduling.md).

The worker that claims the job (``gradacc.scheduling.claim.claim_next``) is node 0: it opens the gang
with its slot (its advertise host and the rendezvous port) and wakes other workers with join
messages. A worker on a machine not yet in the gang takes the lowest free node rank; one on a
machine already in it hands the message on. Every write to one job's gang first locks the job's
row, so joins, the join that completes it and its release are serialised: a gang is complete
(M slots) or released, never both.

No deadlock: a gang still gathering ``gang_wait_s`` after node 0 opened it is released (its slots
deleted, the job queued again). No livelock: while a slot holder waits, an older gang job (the
better one of (priority, id)) that is gathering and lacks this slot's machine takes the machine
from the younger gang, which node 0 releases (or a joiner leaves). The best gathering job always
wins, so competing gangs finish one after the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from gradacc.jobs.records import add_event
from gradacc.jobs.states import requeue_job
from gradacc.tables import GangSlot, Job, JobEvent, JobStatus, utcnow

Joined = Literal["joined", "here", "closed"]
State = Literal["complete", "gathering", "gone"]
Released = Literal["released", "complete", "gone"]


@dataclass(frozen=True)
class Node:
    """One machine's part of a complete gang: what its torchrun needs."""

    node_rank: int
    num_machines: int
    endpoint_host: str  # node 0's advertise host
    port: int
    host: str  # this node's own advertise host


def _lock(session: Session, job_id: str) -> Job | None:
    """The job's row, locked until commit (PostgreSQL; SQLite has one writer at a time)."""
    return session.scalars(select(Job).where(Job.id == job_id).with_for_update()).one_or_none()


def _slots(session: Session, job_id: str) -> list[GangSlot]:
    query = select(GangSlot).where(GangSlot.job_id == job_id).order_by(GangSlot.node_rank)
    return list(session.scalars(query))


def open_gang(
    session: Session, *, job_id: str, worker: str, machine: str, host: str, port: int
) -> None:
    """Node 0's slot, by the worker that just claimed the job; slots left from an earlier claim
    (a worker lost) go first. Commits."""
    _lock(session, job_id)
    session.execute(delete(GangSlot).where(GangSlot.job_id == job_id))
    session.add(GangSlot(job_id=job_id, node_rank=0, worker=worker, machine=machine, host=host,
                         port=port, held_at=utcnow()))  # fmt: skip
    session.commit()


def deadline(slot0: GangSlot, *, wait_s: float) -> datetime:
    return slot0.held_at + timedelta(seconds=wait_s)


def join_gang(
    session: Session, *, job_id: str, worker: str, machine: str, host: str, wait_s: float
) -> Joined:
    """Take a slot in the gang of ``job_id``: "joined", "here" (this machine holds one already:
    hand the message on) or "closed" (not gathering: complete, released or over). Commits."""
    job = _lock(session, job_id)
    slots = _slots(session, job_id) if job is not None else []
    if job is None or not _gathering(job, slots, wait_s=wait_s):
        session.rollback()
        return "closed"
    if machine in {slot.machine for slot in slots}:
        session.rollback()
        return "here"
    free = sorted(set(range(1, job.num_machines)) - {slot.node_rank for slot in slots})
    session.add(GangSlot(job_id=job_id, node_rank=free[0], worker=worker, machine=machine,
                         host=host, port=None, held_at=utcnow()))  # fmt: skip
    try:
        session.commit()
    except IntegrityError:  # a concurrent join took the rank or the machine (SQLite only)
        session.rollback()
        return "closed"
    return "joined"


def _gathering(job: Job, slots: list[GangSlot], *, wait_s: float) -> bool:
    opened = bool(slots) and slots[0].node_rank == 0
    return (
        job.status == JobStatus.RUNNING
        and opened
        and len(slots) < job.num_machines
        and utcnow() < deadline(slots[0], wait_s=wait_s)
    )


def gang_state(session: Session, *, job_id: str, worker: str) -> State:
    """ "gone": this worker holds no slot of it, or the job stopped running (cancelled...)."""
    job = session.get(Job, job_id)
    slots = _slots(session, job_id)
    session.rollback()
    if job is None or job.status != JobStatus.RUNNING or worker not in {s.worker for s in slots}:
        return "gone"
    return "complete" if len(slots) == job.num_machines else "gathering"


def gang_deadline(session: Session, *, job_id: str, wait_s: float) -> datetime | None:
    slot0 = session.get(GangSlot, (job_id, 0))
    return None if slot0 is None else deadline(slot0, wait_s=wait_s)


def release_gang(session: Session, *, job_id: str, worker: str, why: str) -> Released:
    """Node 0 gives up a gang that is not complete: its slots go, and the job is queued again
    with a message to send ("released": the caller sends it, ``enqueued_at`` is set); the claim
    is not counted as an attempt. "complete": it completed meanwhile (start it); "gone": it is
    not this worker's running job any more (cancelled, taken over). Commits."""
    job = _lock(session, job_id)
    if job is None or job.status != JobStatus.RUNNING or job.worker != worker:
        session.rollback()
        return "gone"
    slots = _slots(session, job_id)
    if len(slots) == job.num_machines:
        session.rollback()
        return "complete"
    session.execute(delete(GangSlot).where(GangSlot.job_id == job_id))
    requeue_job(
        session, job_id=job_id, worker=worker, attempts=Job.attempts - 1, released_at=utcnow()
    )
    held = ", ".join(slot.machine for slot in slots)
    message = f"gang released: {len(slots)} of {job.num_machines} machines held ({held}); {why}"
    last = select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.id.desc())
    if session.scalar(last.limit(1)) != "gang_released":  # one per wait, not one per round
        add_event(session, job_id=job_id, kind="gang_released", message=message)
    session.commit()
    return "released"


def leave_gang(session: Session, *, job_id: str, worker: str) -> bool:
    """A joiner gives its slot up; False when the gang completed meanwhile. Commits."""
    job = _lock(session, job_id)
    slots = _slots(session, job_id)
    if job is not None and job.status == JobStatus.RUNNING and len(slots) == job.num_machines:
        session.rollback()
        return False
    session.execute(delete(GangSlot).where(GangSlot.job_id == job_id, GangSlot.worker == worker))
    session.commit()
    return True


def clear_gang(session: Session, *, job_id: str) -> None:
    """The job's slots, all of them: its run is over (node 0 let go). Commits."""
    session.execute(delete(GangSlot).where(GangSlot.job_id == job_id))
    session.commit()


def older_gathering(
    session: Session, *, job_id: str, machine: str, devices: int, wait_s: float
) -> str | None:
    """The best gang job better than ``job_id`` (higher priority, or as high and older) that is
    gathering, holds no slot on ``machine`` and fits ``devices`` there; None if there is none."""
    mine = session.get(Job, job_id)
    if mine is None:
        return None
    other, slot0 = aliased(Job, name="other"), aliased(GangSlot, name="slot0")
    held = select(func.count()).where(GangSlot.job_id == other.id).scalar_subquery()
    here = select(GangSlot.job_id).where(GangSlot.job_id == other.id, GangSlot.machine == machine)
    better = (other.priority > mine.priority) | (
        (other.priority == mine.priority) & (other.id < mine.id)
    )
    query = (
        select(other.id, slot0.held_at)
        .join(slot0, (slot0.job_id == other.id) & (slot0.node_rank == 0))
        .where(
            other.status == JobStatus.RUNNING,
            other.num_machines > 1,
            other.num_processes <= other.num_machines * devices,
            held < other.num_machines,
            ~here.exists(),
            better,
        )
        .order_by(other.priority.desc(), other.id)
    )
    now = utcnow()
    for other_id, held_at in session.execute(query).all():
        if now < held_at + timedelta(seconds=wait_s):
            session.rollback()
            return str(other_id)
    session.rollback()
    return None


def node_of(session: Session, *, job_id: str, machine: str) -> Node | None:
    """This machine's node of the job's complete gang; None when it holds no slot in one."""
    job = session.get(Job, job_id)
    slots = {slot.node_rank: slot for slot in _slots(session, job_id)}
    mine = [slot for slot in slots.values() if slot.machine == machine]
    if job is None or not mine or len(slots) != job.num_machines or slots[0].port is None:
        return None
    return Node(mine[0].node_rank, job.num_machines, slots[0].host, slots[0].port, mine[0].host)


def machines_of(session: Session, *, job_id: str) -> list[str]:
    return [slot.machine for slot in _slots(session, job_id)]
