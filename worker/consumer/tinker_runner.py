"""The consumer's side of the Tinker host: a polling thread that starts the host process
(``python -m worker.tinker.host``) when a Tinker model has requests waiting and no live host, and
stops it at the worker's shutdown. The host ends by itself once it has held nothing for a while."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

from sqlalchemy import exists, or_, select

from gradacc.settings import Settings
from gradacc.tables import utcnow
from gradacc.tinker.tables import TinkerModel, TinkerRequest
from worker.child.ranks.launcher import die_with_parent
from worker.consumer.polling import PollingRunner

log = logging.getLogger(__name__)


class TinkerRunner(PollingRunner):
    name = "tinker"

    def __init__(self, settings: Settings, worker: str, stop: threading.Event) -> None:
        super().__init__(settings, worker, stop)
        self.process: subprocess.Popen[bytes] | None = None
        stopper = threading.Thread(target=self._stop_host, name="tinker-stop", daemon=True)
        stopper.start()

    def run_once(self) -> bool:
        if self.process is not None and self.process.poll() is None:
            return False
        if not self._waiting():
            return False
        command = [sys.executable, "-m", "worker.tinker.host", self.worker]
        self.process = subprocess.Popen(command, env=dict(os.environ), preexec_fn=die_with_parent)
        log.info("tinker host started (pid %d)", self.process.pid)
        return True

    def _waiting(self) -> bool:
        """A model with a request waiting that no live host holds, or that this worker's
        (gone) host held."""
        now = utcnow()
        waiting = exists().where(
            TinkerRequest.model_id == TinkerModel.id, TinkerRequest.status == "pending"
        )
        free = or_(
            TinkerModel.held_until.is_(None),
            TinkerModel.held_until < now,
            TinkerModel.holder == self.worker,
        )
        query = select(TinkerModel.id).where(TinkerModel.status == "active", free, waiting)
        with self.sessions() as session:
            return session.scalar(query.limit(1)) is not None

    def _stop_host(self) -> None:
        self.stop.wait()
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
