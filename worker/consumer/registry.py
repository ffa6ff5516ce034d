"""This worker's row in the registry (``gradacc.workers``): written when the worker is ready,
refreshed by a heartbeat thread, marked with the job it runs, deleted at its warm shutdown."""

from __future__ import annotations

import glob
import logging
import os
import threading

from gradacc.db import DATABASE_ERRORS, session_scope
from gradacc.settings import Settings
from gradacc.workers import beat_worker, register_worker, set_current_job, unregister_worker
from worker.consumer.supervisor import worker_name

log = logging.getLogger(__name__)


def devices() -> list[str]:
    """What this worker can train on, without importing torch here: the CPU, and each NVIDIA
    device node (the training process still picks with the spec's ``device``)."""
    gpus = sorted(glob.glob("/dev/nvidia[0-9]*"))
    return ["cpu", *(f"cuda:{path.removeprefix('/dev/nvidia')}" for path in gpus)]


def register(settings: Settings) -> None:
    with session_scope(settings) as session:
        register_worker(
            session,
            name=worker_name(),
            pid=os.getpid(),
            devices=devices(),
            num_devices=settings.devices,
            machine=settings.machine,
            queue=settings.queue,
        )


def unregister(settings: Settings) -> None:
    try:
        with session_scope(settings) as session:
            unregister_worker(session, name=worker_name())
    except DATABASE_ERRORS:
        log.warning("could not remove this worker from the registry; it will go stale")


def mark_job(settings: Settings, job_id: str | None) -> None:
    try:
        with session_scope(settings) as session:
            set_current_job(session, name=worker_name(), job_id=job_id)
    except DATABASE_ERRORS:
        log.warning("could not record the current job in the registry")


def start_heartbeat_thread(settings: Settings, *, stop: threading.Event) -> threading.Thread:
    """Refresh the row every ``heartbeat_interval_s``; re-register if someone removed it."""

    def loop() -> None:
        while not stop.wait(settings.heartbeat_interval_s):
            try:
                with session_scope(settings) as session:
                    found = beat_worker(session, name=worker_name())
                if not found:
                    register(settings)
            except DATABASE_ERRORS:
                log.warning("worker heartbeat: database unreachable; retrying")

    thread = threading.Thread(target=loop, name="gradacc-worker-heartbeat", daemon=True)
    thread.start()
    return thread
