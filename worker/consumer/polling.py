"""What the batch runner and the item runner share: their polling thread (``PollingRunner``:
``run_once`` every second, a failure such as a database outage logged and tried again), and a
test failpoint: ``held(env, n)`` is true while the file the environment variable ``env`` names
exists and holds a number below ``n``, so the n-th line or item waits."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from gradacc.db import get_sessionmaker
from gradacc.settings import Settings

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


def held(env: str, number: int) -> bool:
    gate = os.environ.get(env)
    try:
        return bool(gate) and number > int(Path(str(gate)).read_text().strip() or 0)
    except (OSError, ValueError):
        return False
