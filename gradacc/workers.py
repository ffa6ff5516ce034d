"""The worker registry: each Celery worker writes its own row (``worker.consumer.registry``);
the API reads it for ``/readyz`` and ``GET /v1/workers``. A worker is alive while its heartbeat
is younger than ``Settings.worker_alive_s``.
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from gradacc.tables import Worker, utcnow


def register_worker(
    session: Session,
    *,
    name: str,
    pid: int,
    devices: list[str],
    num_devices: int = 1,
    machine: str | None = None,
    queue: str | None = None,
) -> None:
    """Insert or refresh this worker's row (a restarted pid may reuse a name). Commits."""
    session.execute(delete(Worker).where(Worker.name == name))
    now = utcnow()
    hostname = socket.gethostname()
    session.add(
        Worker(
            name=name,
            hostname=hostname,
            machine=machine or hostname,
            queue=queue,
            pid=pid,
            devices=devices,
            num_devices=num_devices,
            current_job=None,
            started_at=now,
            heartbeat_at=now,
        )
    )
    session.commit()


def beat_worker(session: Session, *, name: str) -> bool:
    """Refresh the heartbeat; False when the row is gone (then the caller registers again)."""
    stmt = update(Worker).where(Worker.name == name).values(heartbeat_at=utcnow())
    found = session.execute(stmt).rowcount == 1  # type: ignore[attr-defined]
    session.commit()
    return bool(found)


def set_current_job(session: Session, *, name: str, job_id: str | None) -> None:
    stmt = update(Worker).where(Worker.name == name).values(current_job=job_id)
    session.execute(stmt.values(heartbeat_at=utcnow()))
    session.commit()


def unregister_worker(session: Session, *, name: str) -> None:
    session.execute(delete(Worker).where(Worker.name == name))
    session.commit()


def alive_workers(session: Session, *, alive_s: float, now: datetime | None = None) -> list[Worker]:
    """Workers whose heartbeat is younger than ``alive_s``, by name."""
    since = (now or utcnow()) - timedelta(seconds=alive_s)
    query = select(Worker).where(Worker.heartbeat_at >= since).order_by(Worker.name)
    return list(session.scalars(query))


def live_machines(
    session: Session, *, alive_s: float, queue: str | None = None, now: datetime | None = None
) -> dict[str, int]:
    """Each machine with a live worker (of ``queue``, when given) -> the most devices
    (``num_devices``) one of them has. Busy or idle alike: a worker training a job beats all the
    same (``worker.consumer.registry``). A row written before workers recorded their machine and
    queue counts under its host name, for any queue."""
    since = (now or utcnow()) - timedelta(seconds=alive_s)
    machine = func.coalesce(Worker.machine, Worker.hostname)
    query = select(machine, func.max(Worker.num_devices)).where(Worker.heartbeat_at >= since)
    if queue is not None:
        query = query.where(or_(Worker.queue == queue, Worker.queue.is_(None)))
    rows = session.execute(query.group_by(machine)).all()
    return {str(name): int(devices) for name, devices in rows}
