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

No endless cycle: a release while fewer live machines could hold the job than it needs (a
machine went away after its POST, which refuses such a job: ``gradacc.scheduling.capacity``) is
counted in ``gang_releases``; the job then waits longer for each next try (``backoff_s``) and
fails with ``gang_unsatisfiable`` at ``gang_max_releases``. A release while enough machines are
live (busy with other jobs) is not counted: the gang waits its turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from gradacc.jobs.records import add_event
from gradacc.jobs.states import fail_job, requeue_job
from gradacc.scheduling.capacity import machines_that_fit
from gradacc.settings import Settings
from gradacc.tables import GangSlot, Job, JobEvent, JobStatus, utcnow

log = logging.getLogger(__name__)

Joined = Literal["joined", "here", "closed"]
State = Literal["complete", "gathering", "gone"]
Released = Literal["released", "backoff", "failed", "complete", "gone"]
MAX_DOUBLINGS = 4  # a backed-off gang job waits at most 2**4 = 16 gang waits for its next try


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
    session.add(
        GangSlot(
            job_id=job_id,
            node_rank=0,
            worker=worker,
            machine=machine,
            host=host,
            port=port,
            held_at=utcnow(),
        )
    )
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
    session.add(
        GangSlot(
            job_id=job_id,
            node_rank=free[0],
            worker=worker,
            machine=machine,
            host=host,
            port=None,
            held_at=utcnow(),
        )
    )
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


def release_gang(
    session: Session, *, job_id: str, worker: str, why: str, settings: Settings
) -> Released:
    """Node 0 gives up a gang that is not complete: its slots go, and the job is queued again;
    the claim is not counted as an attempt. "released": the caller sends its message now.
    "backoff": fewer live machines can hold it than it needs (``short_of_machines``): the
    release is counted, and the job waits without a message until ``retry_at``, when the
    reconciler sends one. "failed": the ``gang_max_releases``-th such release fails it
    (``gang_unsatisfiable``). "complete": it completed meanwhile (start it); "gone": it is not
    this worker's running job any more (cancelled, taken over). Commits."""
    job = _lock(session, job_id)
    if job is None or job.status != JobStatus.RUNNING or job.worker != worker:
        session.rollback()
        return "gone"
    slots = _slots(session, job_id)
    if len(slots) == job.num_machines:
        session.rollback()
        return "complete"
    session.execute(delete(GangSlot).where(GangSlot.job_id == job_id))
    # Machine names are the operator's: in the log, not in the tenant's events.
    log.info("job %s: gang released holding %s; %s", job_id, [s.machine for s in slots], why)
    held = f"{len(slots)} of {job.num_machines} machines held; {why}"
    live = short_of_machines(session, job=job, settings=settings)
    if live is None:
        _requeue(session, job_id=job_id, worker=worker, message=f"gang released: {held}")
        session.commit()
        return "released"
    releases = job.gang_releases + 1
    shortage = f"{live} live machines can hold it, it needs {job.num_machines}"
    if releases >= settings.gang_max_releases:
        message = (
            f"released {releases} times while {shortage} "
            f"(GRADACC_GANG_MAX_RELEASES={settings.gang_max_releases})"
        )
        fail_job(
            session, job_id=job_id, code="gang_unsatisfiable", message=message, owned_by=worker
        )
        session.commit()
        return "failed"
    delay = backoff_s(releases, wait_s=settings.gang_wait_s)
    message = (
        f"gang released: {held}; {shortage} (release {releases} of at most "
        f"{settings.gang_max_releases}); next try in {delay:g} s"
    )
    _requeue(
        session,
        job_id=job_id,
        worker=worker,
        message=message,
        every=True,
        enqueued_at=None,
        gang_releases=releases,
    )
    session.commit()
    return "backoff"


def _requeue(
    session: Session, *, job_id: str, worker: str, message: str, every: bool = False, **values: Any
) -> None:
    """Queued again, no attempt counted; its event (one per wait unless ``every``)."""
    requeue_job(
        session,
        job_id=job_id,
        worker=worker,
        attempts=Job.attempts - 1,
        released_at=utcnow(),
        **values,
    )
    last = select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.id.desc())
    if every or session.scalar(last.limit(1)) != "gang_released":  # one per wait, not per round
        add_event(session, job_id=job_id, kind="gang_released", message=message)


def short_of_machines(session: Session, *, job: Job, settings: Settings) -> int | None:
    """How many live machines could hold the job (``gradacc.scheduling.capacity``) when that is
    fewer than it needs; None when enough are live (busy ones too: then it waits its turn)."""
    per_node = job.processes_per_machine
    live = machines_that_fit(session, devices=per_node, settings=settings)
    return live if live < job.num_machines else None


def backoff_s(releases: int, *, wait_s: float) -> float:
    """How long a job released ``releases`` times short of machines waits for its next message:
    one gang wait, doubling per release, at most 16 waits (``MAX_DOUBLINGS``)."""
    doublings = min(max(releases - 1, 0), MAX_DOUBLINGS)
    return wait_s * float(1 << doublings)


def retry_at(releases: int, released_at: datetime | None, *, wait_s: float) -> datetime:
    """When a job released ``releases`` times short of machines, last at ``released_at``, may be
    sent its next message (the reconciler sends it then)."""
    if releases == 0 or released_at is None:
        return datetime.min.replace(tzinfo=UTC)
    return released_at + timedelta(seconds=backoff_s(releases, wait_s=wait_s))


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
