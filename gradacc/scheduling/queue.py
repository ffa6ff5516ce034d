"""The job queue: its name, the run-job task's name, the broker's options and the Celery app.

Both sides use it: the API sends the run-job task by name (it never imports the task or the
training core), and the worker builds its app from ``create_celery_app`` with the task module
included. Importing it is cheap (Celery, no torch).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any

from celery import Celery
from sqlalchemy import select, update

from gradacc.db import session_scope
from gradacc.scheduling.broker_files import TRANSPORT as FILE_TRANSPORT
from gradacc.settings import Settings
from gradacc.tables import Job, processes_per_machine

log = logging.getLogger(__name__)

RUN_JOB_TASK = "gradacc.run_job"
# Wakes a worker to take a slot in a gathering gang job (``gradacc.scheduling.gang``). Not counted by
# ``gradacc.scheduling.messages``: it claims no queued job, and one that finds no gang is dropped.
JOIN_GANG_TASK = "gradacc.join_gang"
DEVICES_SUFFIX = ".devices-"


def _filesystem_options(settings: Settings) -> dict[str, Any]:
    queue_dir = settings.broker_dir / "queue"
    processed_dir = settings.broker_dir / "processed"
    control_dir = settings.broker_dir / "control"  # exchange bindings; default is ./control
    for folder in (queue_dir, processed_dir, control_dir):
        folder.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(queue_dir),
        "data_folder_out": str(queue_dir),
        "processed_folder": str(processed_dir),
        "control_folder": str(control_dir),
        "store_processed": False,
        "polling_interval": settings.broker_polling_interval,
    }


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    url = settings.resolved_broker_url()
    if url.startswith("filesystem"):
        return _filesystem_options(settings)
    if url.startswith("sqla+"):
        # Options given here would reach create_engine (TypeError); set the class attribute.
        from kombu.transport import sqlalchemy as sqla_transport

        setattr(sqla_transport.Channel, "polling_interval", settings.broker_polling_interval)  # noqa: B010
        return {}
    return {"visibility_timeout": settings.visibility_timeout_s}


def create_celery_app(settings: Settings, *, include: Sequence[str] = ()) -> Celery:
    """The app with gradacc's queue settings; ``include`` names task modules (the worker's)."""
    url = settings.resolved_broker_url()
    app = Celery("gradacc", broker=url, include=list(include))
    if url.startswith("filesystem"):
        app.conf.broker_transport = (
            FILE_TRANSPORT  # whole messages only (gradacc.scheduling.broker_files)
        )
    app.conf.update(
        broker_transport_options=broker_transport_options(settings),
        broker_connection_retry_on_startup=True,
        task_default_queue=settings.queue,
        task_ignore_result=True,
        task_acks_late=True,  # ack after the job ends, so a lost worker's job is redelivered
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,  # one job per worker at a time, nothing held in reserve
        worker_concurrency=1,
        worker_hijack_root_logger=False,
        task_serializer="json",
        accept_content=["json"],
    )
    return app


def job_queue(settings: Settings, num_processes: int) -> str:
    """The queue of a job that needs ``num_processes`` devices on one machine (the plain queue
    for one); a job over M machines goes to that of its num_processes / M."""
    return (
        settings.queue if num_processes <= 1 else f"{settings.queue}{DEVICES_SUFFIX}{num_processes}"
    )


def worker_queues(settings: Settings) -> list[str]:
    """The queues a worker with ``settings.devices`` devices consumes: every job that fits it.
    Its queue names are also how it advertises its device count (``gradacc.scheduling.capacity``)."""
    return [job_queue(settings, n) for n in range(1, settings.devices + 1)]


def enqueue_job(celery: Celery, settings: Settings, job_id: str, num_processes: int = 1) -> None:
    """Send the run-job task by name: the sender never imports the task or the training core.
    The task id starts with the job id, so Celery's own log lines name the job."""
    task_id = f"{job_id}-{secrets.token_hex(4)}"  # unique per delivery: a job is sent again
    queue = job_queue(settings, num_processes)
    celery.send_task(RUN_JOB_TASK, args=[job_id], queue=queue, task_id=task_id)


def send_join(celery: Celery, settings: Settings, job_id: str, node_processes: int) -> None:
    """Ask a worker with ``node_processes`` devices to join the gang of ``job_id``."""
    task_id = f"{job_id}-join-{secrets.token_hex(4)}"
    queue = job_queue(settings, node_processes)
    celery.send_task(JOIN_GANG_TASK, args=[job_id], queue=queue, task_id=task_id)


def processes_of(settings: Settings, job_id: str) -> int:
    """The devices the job takes on each machine: the queue its message goes to (1: gone)."""
    with session_scope(settings) as session:
        row = session.execute(
            select(Job.num_processes, Job.num_machines).where(Job.id == job_id)
        ).one_or_none()
    return 1 if row is None else processes_per_machine(*row)


def send_or_leave(celery: Celery, settings: Settings, job_id: str) -> bool:
    """Send the job's run message to the queue of workers with its devices per machine. When the
    broker is down, the job stops counting on a message (``enqueued_at`` cleared) and the
    reconciler sends it later; False then."""
    try:
        enqueue_job(celery, settings, job_id, processes_of(settings, job_id))
    except Exception as exc:  # the broker is down: the reconciler sends it later
        log.warning("job %s: its message could not be sent (%s)", job_id, exc)
        with session_scope(settings) as session:
            session.execute(update(Job).where(Job.id == job_id).values(enqueued_at=None))
            session.commit()
        return False
    return True
