"""Find jobs the broker lost and enqueue them again; fail jobs that keep losing their worker;
ask for a preemption by priority when one is due (``gradacc.scheduling.preemption``).

The database is the source of truth. A job is "lost" when it stayed queued long after its last
enqueue, or when it is running but its worker stopped beating. Enqueueing twice is harmless:
a message claims at most one job, and one job is claimed once (``gradacc.scheduling.claim``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from gradacc.db import session_scope
from gradacc.jobs.records import add_event
from gradacc.jobs.states import fail_job, failed_attempts
from gradacc.scheduling.gang import retry_at
from gradacc.scheduling.preemption import preempt_for_waiting
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, utcnow

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def reconcile_jobs(
    settings: Settings, *, enqueue: Callable[[str], None], now: datetime | None = None
) -> ReconcileReport:
    now = now or utcnow()
    report = ReconcileReport()
    with session_scope(settings) as session:
        lost_queued = (Job.status == JobStatus.QUEUED) & or_(
            Job.enqueued_at.is_(None),
            Job.enqueued_at < now - timedelta(seconds=settings.requeue_after_s),
        )
        stale = now - timedelta(seconds=settings.stale_after_s)
        orphaned = (Job.status == JobStatus.RUNNING) & (Job.heartbeat_at < stale)
        query = select(
            Job.id,
            Job.status,
            failed_attempts(),
            Job.enqueued_at,
            Job.gang_releases,
            Job.released_at,
        )
        # In id order: each job's events lock its stream (gradacc.jobs.records.next_stream_place), and two
        # reconcilers taking those locks in one order cannot deadlock.
        for job_id, status, failures, enqueued_at, releases, released_at in session.execute(
            query.where(lost_queued | orphaned).order_by(Job.id)
        ).all():
            if enqueued_at is None and _backing_off(releases, released_at, now, settings):
                continue  # a gang released short of machines: no message until its back-off ends
            if status == JobStatus.RUNNING and failures >= settings.max_attempts:
                if _fail_hopeless(session, job_id=job_id, attempts=failures):
                    report.failed.append(job_id)
                continue
            if status == JobStatus.RUNNING and enqueued_at is not None and enqueued_at >= stale:
                continue  # re-sent within the last stale period; a worker will take it over
            session.execute(update(Job).where(Job.id == job_id).values(enqueued_at=now))
            add_event(session, job_id=job_id, kind="requeued", message=f"re-enqueued ({status})")
            report.requeued.append(job_id)
        session.commit()
    for job_id in report.requeued:
        enqueue(job_id)
    return report


def _backing_off(
    releases: int, released_at: datetime | None, now: datetime, settings: Settings
) -> bool:
    """A queued job without a message, released short of machines (``gradacc.scheduling.gang``),
    whose next try is not due yet (a running job has no released_at: never)."""
    return now < retry_at(releases, released_at, wait_s=settings.gang_wait_s)


def _fail_hopeless(session: Session, *, job_id: str, attempts: int) -> bool:
    message = f"the job lost its worker {attempts} times"
    return fail_job(
        session, job_id=job_id, code="worker_lost", message=message, event="worker lost too often"
    )


def preempt_pass(settings: Settings) -> None:
    """With ``preempt`` on: let a waiting job of higher priority stop a running one."""
    if not settings.preempt:
        return
    with session_scope(settings) as session:
        asked = preempt_for_waiting(session, settings=settings)
    if asked is not None:
        log.warning("reconciler: job %s preempts job %s", asked.preemptor, asked.victim)


def start_reconciler_thread(
    settings: Settings, *, enqueue: Callable[[str], None], stop: threading.Event
) -> threading.Thread:
    """Reconcile now and then every ``reconcile_interval_s`` until ``stop`` is set; each pass
    first asks for a preemption if one is due (``preempt_pass``)."""

    def loop() -> None:
        while True:
            try:
                preempt_pass(settings)
                report = reconcile_jobs(settings, enqueue=enqueue)
                if report.requeued or report.failed:
                    log.warning("reconciler: requeued %s failed %s", report.requeued, report.failed)
            except Exception:
                log.exception("reconciler pass failed; retrying")
            if stop.wait(settings.reconcile_interval_s):
                return

    thread = threading.Thread(target=loop, name="gradacc-reconciler", daemon=True)
    thread.start()
    return thread
