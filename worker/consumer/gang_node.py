"""A worker's part in a job over several machines (``gradacc.scheduling.gang``, docs/distributed.md).

Node 0 is the worker that claimed the job: it opens the gang with its slot and a rendezvous
port, and sends M-1 join messages to the queue of workers with W/M devices. A worker that gets
one takes a slot (``join_and_run``), or hands the message on when its machine holds one already.
Every slot holder then waits (``gather``) until the gang is complete, and runs its node
(``worker.child.entry`` starts torchrun with this machine's rendezvous), or lets go: at the
bounded wait, when the worker stops, or when an older gathering gang job needs this machine (the
holder then joins that one). Node 0 beats the job's heartbeat while it waits, and it alone
records the job's outcome; the other nodes' supervisors watch the job as node 0's.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Literal

from celery import Celery
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.executors.protocol import Executor, JobShape, Placement
from gradacc.jobs.states import release_job, update_running_job
from gradacc.scheduling.gang import (
    clear_gang,
    gang_deadline,
    gang_state,
    join_gang,
    leave_gang,
    machines_of,
    node_of,
    older_gathering,
    open_gang,
    release_gang,
)
from gradacc.scheduling.queue import send_join, send_or_leave
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, utcnow
from worker.child.ranks.ports import store_port
from worker.consumer import registry
from worker.consumer.supervisor import shutdown_requested, supervise

log = logging.getLogger(__name__)

POLL_S = 0.25  # how often a slot holder looks at its gang
HAND_ON_S = 0.5  # a join message this machine cannot use waits this long before it goes on


@dataclass(frozen=True)
class Gathered:
    """How the wait ended; ``older``: the gang job this worker yielded its machine to."""

    outcome: Literal["complete", "released", "gone", "yielded"]
    older: str | None = None


def rendezvous_port(settings: Settings) -> int:
    """``rdzv_port``, or a port free on this machine now, below the ephemeral range (``ports``)."""
    if settings.rdzv_port:
        return settings.rdzv_port
    return store_port()


def open_and_gather(settings: Settings, app: Celery, *, job: JobShape, worker: str) -> Gathered:
    """Node 0, just after its claim: open the gang, wake M-1 workers, wait for them."""
    host = settings.resolved_advertise_host()
    with session_scope(settings) as session:
        port = rendezvous_port(settings)
        open_gang(
            session, job_id=job.id, worker=worker, machine=settings.machine, host=host, port=port
        )
    per_node = job.processes_per_machine
    for _ in range(job.num_machines - 1):
        send_join(app, settings, job.id, per_node)
    log.info(
        "job %s: gang of %d opened on %s (rendezvous %s:%d)",
        job.id,
        job.num_machines,
        settings.machine,
        host,
        port,
    )
    return gather(settings, app, job_id=job.id, worker=worker, node0=True)


def gather(settings: Settings, app: Celery, *, job_id: str, worker: str, node0: bool) -> Gathered:
    """Wait until the gang is complete, or let this slot go (see the module's docstring)."""
    while True:
        with session_scope(settings) as session:
            state = gang_state(session, job_id=job_id, worker=worker)
            if state != "gathering":
                return Gathered(state)
            if node0:
                update_running_job(session, job_id=job_id, heartbeat_at=utcnow())
                session.commit()
            ends = gang_deadline(session, job_id=job_id, wait_s=settings.gang_wait_s)
            older = older_gathering(
                session,
                job_id=job_id,
                machine=settings.machine,
                devices=settings.devices,
                wait_s=settings.gang_wait_s,
            )
            expired = ends is None or utcnow() >= ends
            why = _why_let_go(settings, job_id=job_id, expired=expired, older=older)
            if why is not None:
                if node0:
                    released = release_gang(
                        session, job_id=job_id, worker=worker, why=why, settings=settings
                    )
                    if released == "released":  # queued again: it counts on a message
                        send_or_leave(app, settings, job_id)
                    let_go = released != "complete"
                else:
                    let_go = leave_gang(session, job_id=job_id, worker=worker)
                if let_go:
                    log.info("job %s: slot on %s let go: %s", job_id, settings.machine, why)
                    return Gathered("yielded", older) if older else Gathered("released")
        time.sleep(POLL_S)


def _why_let_go(settings: Settings, *, job_id: str, expired: bool, older: str | None) -> str | None:
    if shutdown_requested.is_set():
        return "the worker is stopping"
    if expired:
        return f"not complete within {settings.gang_wait_s:g} s"
    if older is not None:  # another tenant's, maybe: its id stays in the log
        log.info(
            "job %s: machine %s goes to the older gang job %s", job_id, settings.machine, older
        )
        return "an older gang job takes one of its machines"
    return None


def placement_of(settings: Settings, job: JobShape) -> Placement:
    """The complete gang's placement: node 0's rendezvous (as this machine's node reads it) and
    its machines, node 0 first."""
    with session_scope(settings) as session:
        node = node_of(session, job_id=job.id, machine=settings.machine)
        machines = tuple(machines_of(session, job_id=job.id))
    rendezvous = None if node is None else f"{node.endpoint_host}:{node.port}"
    return Placement(job.id, job.num_machines, job.processes_per_machine, rendezvous, machines)


def join_and_run(
    settings: Settings, app: Celery, *, job_id: str, worker: str, executor: Executor
) -> str:
    """A join message (or a yield to an older gang): take a slot, wait, run this node with
    ``executor`` (the ``local`` one: it starts this machine's training process)."""
    with session_scope(settings) as session:
        joined = join_gang(
            session,
            job_id=job_id,
            worker=worker,
            machine=settings.machine,
            host=settings.resolved_advertise_host(),
            wait_s=settings.gang_wait_s,
        )
        job = session.get(Job, job_id)
        per_node = 1 if job is None else job.processes_per_machine
        shape = JobShape(job_id, 1 if job is None else job.num_machines, per_node)
    if joined == "closed":
        return "skipped"
    if joined == "here":  # another machine's worker must take it
        time.sleep(HAND_ON_S)
        send_join(app, settings, job_id, per_node)
        return "handed on"
    log.info("job %s: slot taken on %s", job_id, settings.machine)
    gathered = gather(settings, app, job_id=job_id, worker=worker, node0=False)
    if gathered.outcome == "yielded" and gathered.older is not None:
        return join_and_run(settings, app, job_id=gathered.older, worker=worker, executor=executor)
    if gathered.outcome != "complete":
        return f"gang {gathered.outcome}"
    with session_scope(settings) as session:
        owner = session.scalar(select(Job.worker).where(Job.id == job_id))
    if owner is None:
        return "gang gone"
    placement = placement_of(settings, shape)
    registry.mark_job(settings, job_id)
    try:
        return supervise(
            settings, job_id=job_id, owner=owner, executor=executor, placement=placement
        )
    finally:
        registry.mark_job(settings, None)
        end_of_node(settings, job_id=job_id)


def end_of_node(settings: Settings, *, job_id: str) -> None:
    """A node's run is over: a job that no longer runs holds no slot."""
    with session_scope(settings) as session:
        if session.scalar(select(Job.status).where(Job.id == job_id)) != JobStatus.RUNNING:
            clear_gang(session, job_id=job_id)


def end_of_gang(settings: Settings, *, job_id: str, worker: str) -> None:
    """Node 0 let go (its run ended, or the gang never started): no slot is left held."""
    with session_scope(settings) as session:
        clear_gang(session, job_id=job_id)
        release_job(session, job_id=job_id, worker=worker, jobs_dir=settings.jobs_dir)
        session.commit()
