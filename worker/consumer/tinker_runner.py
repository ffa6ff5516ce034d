"""The consumer's side of the Tinker host: a polling thread that starts the host process
(``python -m worker.tinker.host``) when a Tinker model has requests waiting and no live host, and
stops it at the worker's shutdown. The host ends by itself once it has held nothing for a while.

A worker holds a training job or Tinker models, never both: the host starts only while no job
runs here, and while it lives the worker leaves job messages to the others (``job_turn``; the
reconciler sends them again). On one machine of one worker, a job waits until the host has let
its models go (their session finished, or ``tinker_idle_s`` without a request)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gradacc.settings import Settings
from gradacc.tables import utcnow
from gradacc.tinker import queue
from worker.child.ranks.launcher import die_with_parent
from worker.consumer.polling import PollingRunner

log = logging.getLogger(__name__)
_turn = threading.Lock()  # between a job's claim and the host's start
_state: dict[str, object] = {"job": False, "host": None}


def _hosting() -> bool:
    host = _state["host"]
    return isinstance(host, subprocess.Popen) and host.poll() is None


@contextmanager
def job_turn() -> Iterator[bool]:
    """Whether this worker may take a job now (False: its Tinker host holds models); while the
    caller's block runs, the host is not started."""
    with _turn:
        free = not _hosting()
        _state["job"] = free
    try:
        yield free
    finally:
        with _turn:
            _state["job"] = False


class TinkerRunner(PollingRunner):
    name = "tinker"

    def __init__(self, settings: Settings, worker: str, stop: threading.Event) -> None:
        super().__init__(settings, worker, stop)
        stopper = threading.Thread(target=self._stop_host, name="tinker-stop", daemon=True)
        stopper.start()

    def run_once(self) -> bool:
        if _hosting() or not self._waiting():
            return False
        with _turn:
            if _state["job"] or _hosting():
                return False
            command = [sys.executable, "-m", "worker.tinker.host", self.worker]
            host = subprocess.Popen(command, env=dict(os.environ), preexec_fn=die_with_parent)
            _state["host"] = host
        log.info("tinker host started (pid %d)", host.pid)
        return True

    def _waiting(self) -> bool:
        """A model with a request waiting that no live host holds, or that this worker's
        (gone) host held."""
        query = queue.waiting_unheld(utcnow(), or_held_by=self.worker)
        with self.sessions() as session:
            return session.scalar(query.limit(1)) is not None

    def _stop_host(self) -> None:
        self.stop.wait()
        host = _state["host"]
        if isinstance(host, subprocess.Popen) and host.poll() is None:
            host.terminate()
