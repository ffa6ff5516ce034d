"""What the batch runner and the item runner share: their polling thread (``PollingRunner``:
``run_once`` every second, a failure such as a database outage logged and tried again), the wait
before each line or item (``wait_turn``: the lease renewed, none while this worker trains), and a
test failpoint: ``held(env, n)`` is true while the file the environment variable ``env`` names
exists and holds a number below ``n``, so the n-th line or item waits."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from gradacc.db import get_sessionmaker
from gradacc.settings import Settings
from gradacc.tables import Worker

log = logging.getLogger(__name__)
POLL_S = 1.0


class PollingRunner:
    name = "runner"

    def __init__(self, settings: Settings, worker: str, stop: threading.Event) -> None:
        self.settings, self.worker, self.stop = settings, worker, stop
        self.sessions: sessionmaker[Session] = get_sessionmaker(settings)

    def start_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self._loop, name=f"gradacc-{self.name}", daemon=True)
        thread.start()
        return thread

    def _loop(self) -> None:
        while not self.stop.wait(POLL_S):
            try:
                self.run_once()
            except Exception:  # a database outage: tried again at the next poll
                log.exception("the %s runner failed; it tries again", self.name)

    def run_once(self) -> bool:
        raise NotImplementedError

    def wait_turn(self, goes_on: Callable[[Session], bool], hold: str, number: int) -> bool:
        """Whether to do the ``number``-th line or item (from 1) now. ``goes_on(session)`` renews
        the lease and says whether the work goes on (False: another worker holds it, or it ended
        there); then this waits while this worker trains, or while the test gate ``hold`` holds
        it."""
        while True:
            with self.sessions() as session:
                if not goes_on(session):
                    return False
                worker = session.get(Worker, self.worker)
                busy = worker is not None and worker.current_job is not None
            if self.stop.is_set():
                return False
            waiting = held(hold, number)
            if not busy and not waiting:
                return True
            time.sleep(0.2 if waiting else POLL_S)


def held(env: str, number: int) -> bool:
    gate = os.environ.get(env)
    try:
        return bool(gate) and number > int(Path(str(gate)).read_text().strip() or 0)
    except (OSError, ValueError):
        return False
