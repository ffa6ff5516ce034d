"""The consumer's Tinker sweep, every ``SWEEP_S`` on each worker (a Tinker session's models are
hosted by its host job, ``gradacc.tinker.placement``, which the scheduler places like any job):

- a session with a request waiting that no live host holds, and no host job queued or running,
  gets one and its message (the API does this as the client polls its future; the sweep catches
  a host that ended just as a call came, with no poll after it);
- a parked model (swapped to disk between host jobs) without a request for ``tinker_idle_s`` is
  closed and its file deleted."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from celery import Celery

from gradacc.scheduling.queue import send_or_leave
from gradacc.settings import Settings
from gradacc.tables import utcnow
from gradacc.tinker import placement, queue
from gradacc.tinker.tables import TinkerModel
from worker.consumer.polling import PollingRunner

log = logging.getLogger(__name__)
SWEEP_S = 5.0


class TinkerRunner(PollingRunner):
    name = "tinker"

    def __init__(self, settings: Settings, worker: str, stop: threading.Event, app: Celery) -> None:
        super().__init__(settings, worker, stop)
        self.app = app
        self.next_sweep = 0.0

    def run_once(self) -> bool:
        if time.monotonic() < self.next_sweep:
            return False
        self.next_sweep = time.monotonic() + SWEEP_S
        waiting = queue.waiting_unheld(utcnow()).with_only_columns(TinkerModel.session_id)
        with self.sessions() as session:
            made = [placement.ensure_host(session, sid) for sid in set(session.scalars(waiting))]
            files = placement.close_idle(session, idle_s=self.settings.tinker_idle_s)
        for job_id in filter(None, made):
            log.info("tinker: host job %s queued by the sweep", job_id)
            send_or_leave(self.app, self.settings, job_id)
        for file in files:
            Path(file).unlink(missing_ok=True)
        return bool(made or files)
