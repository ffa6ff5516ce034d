"""Where queued jobs stand, for the job object (``gradacc.scheduling.position``). Only a queued job costs
a query: a running or finished job's poll pays nothing for it."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from gradacc.scheduling.position import QueueSpot, queue_spots
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus


def spot_of(engine: Engine, *, job_id: str, status: str, settings: Settings) -> QueueSpot | None:
    if status != JobStatus.QUEUED:
        return None
    with engine.connect() as connection:
        return queue_spots(connection, [job_id], settings=settings).get(job_id)


def spots_of(session: Session, *, jobs: list[Job], settings: Settings) -> dict[str, QueueSpot]:
    queued = [job.id for job in jobs if job.status == JobStatus.QUEUED]
    return queue_spots(session, queued, settings=settings) if queued else {}
