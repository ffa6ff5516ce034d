"""Use cases of /v1/workers and /readyz: the live workers, and whether the service can take a job.
Keyword-only, verb-first; reads only."""

from __future__ import annotations

from celery import Celery
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from gradacc.errors import NotReady, NoWorkers
from gradacc.settings import Settings
from gradacc.tables import Job, Worker
from gradacc.workers import alive_workers


def list_workers(session: Session, *, settings: Settings) -> list[Worker]:
    return alive_workers(session, alive_s=settings.worker_alive_s)


def list_workers_for(
    session: Session, *, settings: Settings, tenant: str
) -> tuple[list[Worker], set[str]]:
    """The live workers, and which of their current jobs belong to ``tenant`` (a job id of
    another tenant is not shown to this one)."""
    workers = list_workers(session, settings=settings)
    running = [w.current_job for w in workers if w.current_job is not None]
    own = select(Job.id).where(Job.id.in_(running), Job.tenant == tenant)
    return workers, set(session.scalars(own)) if running else set()


def check_readiness(
    session: Session, *, celery: Celery, settings: Settings
) -> tuple[dict[str, str], list[Worker]]:
    """Raise ``NotReady`` naming what cannot be reached (the database, the broker), or
    ``NoWorkers`` when no worker is alive to start what would be accepted."""
    try:
        session.execute(text("SELECT 1"))
    except Exception as exc:
        raise NotReady(f"database unreachable: {type(exc).__name__}") from exc
    try:
        with celery.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        raise NotReady(f"broker unreachable: {type(exc).__name__}") from exc
    workers = list_workers(session, settings=settings)
    if not workers:
        raise NoWorkers("no worker is alive: accepted jobs would wait until one starts")
    return {"database": "ok", "broker": "ok", "workers": f"{len(workers)} alive"}, workers
