"""The Celery task: claim the job (idempotently), then supervise its training process."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

from celery import current_app, shared_task
from celery.signals import worker_ready, worker_shutdown, worker_shutting_down
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.jobs import add_event, claim_job
from gradacc.models import Job, utcnow
from gradacc.settings import get_settings
from worker.celery_app import RUN_JOB_TASK, enqueue_job
from worker.reconciler import start_reconciler_thread
from worker.supervisor import shutdown_requested, supervise, worker_name

log = logging.getLogger(__name__)


@shared_task(name=RUN_JOB_TASK, ignore_result=True)
def run_job(job_id: str) -> str:
    """Train job ``job_id`` unless another delivery already did (or is doing) it.

    Returns what happened, for the log: "skipped" when the job was not ours to run.
    """
    settings = get_settings()
    worker = worker_name()
    with session_scope(settings) as session:
        claimed = claim_job(
            session,
            job_id=job_id,
            worker=worker,
            stale_before=utcnow() - timedelta(seconds=settings.stale_after_s),
            max_attempts=settings.max_attempts,
        )
        if not claimed:
            log.info("job %s is not claimable (done, running elsewhere or cancelled)", job_id)
            return "skipped"
        attempt = session.scalar(select(Job.attempts).where(Job.id == job_id))
        message = f"started on {worker} (attempt {attempt})"
        add_event(session, job_id=job_id, kind="started", message=message)
        session.commit()
    return supervise(settings, job_id=job_id)


_reconciler_stop = threading.Event()


@worker_ready.connect
def _start_reconciler(sender: Any = None, **_: Any) -> None:
    settings = get_settings()
    app = current_app._get_current_object()
    start_reconciler_thread(
        settings, enqueue=lambda job_id: enqueue_job(app, settings, job_id), stop=_reconciler_stop
    )


@worker_shutdown.connect
def _stop_reconciler(sender: Any = None, **_: Any) -> None:
    _reconciler_stop.set()


@worker_shutting_down.connect
def _preempt_running_job(sender: Any = None, **_: Any) -> None:
    shutdown_requested.set()
