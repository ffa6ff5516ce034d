"""The item runner: a thread of every worker that takes an eval run or a distillation and does its
items one at a time (``worker.consumer.run_kinds`` says what an item is for each), keeping each
item as it finishes (``gradacc.run_items``).

Like the batch runner: one item in flight per worker, none while this worker trains a job; the
work is held by a lease renewed before each item, so when a worker dies another goes on from the
items kept, and a kept item is never asked or graded again. A run asked to cancel ends at its
next item, keeping what it finished.

``GRADACC_FAILPOINT_RUN_HOLD=PATH`` (tests only): while PATH exists and holds a number N, the
runner parks before each item past the N-th (its lease renewed), so a test can kill a worker or
cancel mid-way without racing a tiny model.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from sqlalchemy.orm import Session

from gradacc import leases, run_items
from gradacc.settings import Settings
from gradacc.tables import RunStatus, utcnow
from worker.consumer.polling import PollingRunner
from worker.consumer.run_kinds import KINDS, Kind

log = logging.getLogger(__name__)
RETRY_S = 2.0  # no server could answer an item: it is asked again after this
HOLD = "GRADACC_FAILPOINT_RUN_HOLD"
RUNNING = (RunStatus.QUEUED, RunStatus.IN_PROGRESS, RunStatus.CANCELING)


class ItemRunner(PollingRunner):
    name = "items"

    def __init__(self, settings: Settings, worker: str, stop: threading.Event) -> None:
        super().__init__(settings, worker, stop)
        self.kinds = [kind(self.sessions, settings, stop) for kind in KINDS]

    def run_once(self) -> bool:
        """Take an eval run or a distillation and run it as far as it goes; False: none."""
        for kind in self.kinds:
            with self.sessions() as session:
                run = leases.claim(
                    session,
                    kind.table,
                    worker=self.worker,
                    lease_s=self.settings.batch_lease_s,
                    running=RUNNING,
                )
                if run is None:
                    continue
                session.expunge(run)
            self._run(kind, run)
            return True
        return False

    def _run(self, kind: Kind, run: Any) -> None:
        with self.sessions() as session:
            found = session.get(kind.table, run.id)
            assert found is not None
            try:
                rows = kind.rows(session, found)
            except ValueError as problem:
                found.error = {"code": "invalid_data", "message": str(problem)}
                kind.end(session, found, RunStatus.FAILED)
                return
            if found.status == RunStatus.QUEUED:
                found.status, found.started_at = RunStatus.IN_PROGRESS, utcnow()
            found.total = len(rows)
            session.commit()
            done = run_items.kept_numbers(session, run.id)
        for index, row in enumerate(rows):
            if index in done:
                continue
            if not self._turn(kind, run, index):
                return
            self._item(kind, run, index, row)
        with self.sessions() as session:
            found = session.get(kind.table, run.id)
            if found is not None and found.holder == self.worker:
                kind.end(session, found, RunStatus.COMPLETED)
                log.info("%s %s completed", kind.name, run.id)

    def _turn(self, kind: Kind, run: Any, index: int) -> bool:
        """Whether to do the next item now: the lease renewed, the run not canceled (then it
        ends here), and this worker not training (then it waits)."""

        def goes_on(session: Session) -> bool:
            lease_s = self.settings.batch_lease_s
            status = leases.renew(session, kind.table, run.id, worker=self.worker, lease_s=lease_s)
            if status is None:
                return False  # another worker holds it now
            if status == RunStatus.CANCELING:
                found = session.get(kind.table, run.id)
                assert found is not None
                kind.end(session, found, RunStatus.CANCELED)
                log.info("%s %s canceled", kind.name, run.id)
                return False
            return True

        return self.wait_turn(goes_on, HOLD, index + 1)

    def _item(self, kind: Kind, run: Any, index: int, row: Any) -> None:
        """Do one item and keep it; an item no server can answer now is tried again."""
        while not self.stop.is_set():
            done = kind.one(run, index, row)
            if done is not None:
                with self.sessions() as session:
                    run_items.keep(session, run.id, index, *done)
                return
            time.sleep(RETRY_S)
