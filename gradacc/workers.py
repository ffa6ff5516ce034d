"""The worker registry: each Celery worker writes its own row (``worker.consumer.registry``);
the API reads it for ``/readyz`` and ``GET /v1/workers``. A worker is alive while its heartbeat
is younger than ``Settings.worker_alive_s``.
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from gradacc.tables import Worker, utcnow


def register_worker(
    session: Session, *, name: str, pid: int, devices: list[str], num_devices: int = 1
) -> None:
    """Insert or refresh this worker's row (a restarted pid may reuse a name). Commits."""
    session.execute(delete(Worker).where(Worker.name == name))
    now = utcnow()
    session.add(
        Worker(
            name=name,
            hostname=socket.gethostname(),
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
