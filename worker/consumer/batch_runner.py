"""The batch runner: a thread of every worker that takes a ``/v1/batches`` batch and answers its
lines, one at a time, on a predict server (``gradacc.batches``; docs/batches.md).

Low priority by design: one line in flight per worker, none while this worker trains a job, so
live requests and training keep their place. The batch is held by a lease renewed before each
line; a worker that dies lets it lapse and another worker (or this one, restarted) goes on from
the lines kept. A line is kept in the commit that records its answer, and a kept line is never
asked again, so no line is answered twice in the output.

``GRADACC_FAILPOINT_BATCH_HOLD=PATH`` (tests only): while PATH exists and holds a number N, the
runner parks before each line past the N-th (its lease renewed), so a test can kill a worker or
cancel a batch mid-way without racing a tiny model.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy.orm import Session

from gradacc.batches import store
from gradacc.batches.lines import (
    LineError,
    answered,
    custom_id_of,
    prepare,
    read_line,
    refused,
)
from gradacc.serving.ask import ask
from gradacc.sources.files import local_source
from gradacc.tables import Batch, BatchStatus, File, utcnow
from worker.consumer.polling import PollingRunner

log = logging.getLogger(__name__)
RETRY_S = 2.0  # no predict server answers now: the line is asked again after this
HOLD = "GRADACC_FAILPOINT_BATCH_HOLD"
TRANSIENT = (429, 502, 503, 504)  # asked again, not kept


class BatchRunner(PollingRunner):
    name = "batches"

    def run_once(self) -> bool:
        """Take a batch and run it as far as it goes; False when there was none."""
        with self.sessions() as session:
            batch = store.claim(session, worker=self.worker, lease_s=self.settings.batch_lease_s)
            if batch is None:
                return False
            session.expunge(batch)
        self._run(batch)
        return True

    def _run(self, batch: Batch) -> None:
        with self.sessions() as session:
            lines = self._lines(session, batch)
            if lines is None:
                return
            done = store.done_lines(session, batch.id)
        for number, text in lines:
            if number in done:
                continue
            if not self._turn(batch, number):
                return
            self._answer(batch, number, text)
        with self.sessions() as session:
            found = session.get(Batch, batch.id)
            if found is not None and found.holder == self.worker:
                found.finalizing_at = utcnow()
                store.end(session, self.settings, found, BatchStatus.COMPLETED)
                log.info("batch %s completed", batch.id)

    def _lines(self, session: Session, batch: Batch) -> list[tuple[int, str]] | None:
        """The input's lines (numbered from 1, blank ones left out), the batch in progress; None
        when it failed (its input file is gone)."""
        file = session.get(File, batch.input_file_id)
        found = session.get(Batch, batch.id)
        assert found is not None
        if file is None or file.tenant != batch.tenant:
            found.errors = [
                {
                    "code": "file_not_found",
                    "line": None,
                    "message": f"the input file {batch.input_file_id} is gone",
                }
            ]
            store.end(session, self.settings, found, BatchStatus.FAILED)
            return None
        text = local_source(self.settings, file).read_text(encoding="utf-8", errors="replace")
        lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
        if found.status == BatchStatus.VALIDATING:
            found.status, found.total, found.in_progress_at = "in_progress", len(lines), utcnow()
            session.commit()
        return lines

    def _turn(self, batch: Batch, number: int) -> bool:
        """Whether to ask the next line now: the lease renewed, the batch neither cancelled nor
        expired (then it ends here), and this worker not training (then it waits)."""

        def goes_on(session: Session) -> bool:
            status = store.renew(
                session, batch.id, worker=self.worker, lease_s=self.settings.batch_lease_s
            )
            if status is None:
                return False  # another worker holds it now
            ending = _ending(status, batch)
            if ending is not None:
                found = session.get(Batch, batch.id)
                assert found is not None
                store.end(session, self.settings, found, ending)
                log.info("batch %s %s", batch.id, ending)
                return False
            return True

        return self.wait_turn(goes_on, HOLD, number)

    def _answer(self, batch: Batch, number: int, text: str) -> None:
        """Ask one line and keep its answer; a line no server can answer now is asked again."""
        while not self.stop.is_set():
            with self.sessions() as session:
                try:
                    prepared = prepare(session, self.settings, read_line(text), batch.tenant)
                except LineError as problem:
                    store.keep(
                        session, batch.id, number, True, refused(custom_id_of(text), problem)
                    )
                    return
            # The line's model is checked and its alias followed already (``prepare``).
            status, body = ask(
                self.sessions,
                self.settings,
                tenant=batch.tenant,
                path=prepared.path,
                body=prepared.body,
                checked=True,
            )
            if status not in TRANSIENT:
                with self.sessions() as session:
                    store.keep(session, batch.id, number, *answered(prepared, status, body))
                return
            time.sleep(RETRY_S)


def _ending(status: str, batch: Batch) -> BatchStatus | None:
    if status == BatchStatus.CANCELLING:
        return BatchStatus.CANCELLED
    if utcnow() > batch.expires_at:
        return BatchStatus.EXPIRED
    return None
