"""A batch's rows: the lease a worker holds it by, its answered lines, and its ending (the output
and error files written from the lines kept, in input order)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gradacc import leases
from gradacc.settings import Settings
from gradacc.sources.files import write_jsonl
from gradacc.tables import Batch, BatchLine, BatchStatus, FilePurpose, utcnow

RUNNING = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING)
ENDED = (BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.EXPIRED, BatchStatus.CANCELLED)


def claim(session: Session, *, worker: str, lease_s: float) -> Batch | None:
    """The oldest batch to run that no live worker holds (or this one), held for ``lease_s``.
    Commits."""
    return leases.claim(session, Batch, worker=worker, lease_s=lease_s, running=RUNNING)


def renew(session: Session, batch_id: str, *, worker: str, lease_s: float) -> str | None:
    """The batch's status, its lease renewed; None when another worker holds it now."""
    return leases.renew(session, Batch, batch_id, worker=worker, lease_s=lease_s)


def done_lines(session: Session, batch_id: str) -> set[int]:
    return set(session.scalars(select(BatchLine.line).where(BatchLine.batch_id == batch_id)))


def keep(session: Session, batch_id: str, line: int, failed: bool, record: Any) -> bool:
    """The line's answer kept (False: it was kept already, by a worker that held the batch
    before). Commits."""
    return leases.keep_once(
        session, BatchLine(batch_id=batch_id, line=line, failed=failed, record=record)
    )


def counts(session: Session, batch_id: str) -> tuple[int, int]:
    """(completed, failed) lines so far."""
    rows = session.execute(
        select(BatchLine.failed, func.count())
        .where(BatchLine.batch_id == batch_id)
        .group_by(BatchLine.failed)
    )
    found = {bool(failed): int(n) for failed, n in rows}
    return found.get(False, 0), found.get(True, 0)


def end(session: Session, settings: Settings, batch: Batch, status: BatchStatus) -> None:
    """Write the output and error files from the lines kept (none: no file), then the status.
    Commits."""
    lines = session.scalars(
        select(BatchLine).where(BatchLine.batch_id == batch.id).order_by(BatchLine.line)
    ).all()
    for failed, field in ((False, "output_file_id"), (True, "error_file_id")):
        records = [line.record for line in lines if line.failed == failed]
        if records and getattr(batch, field) is None:
            name = f"{batch.id}_{'error' if failed else 'output'}.jsonl"
            file_id = write_jsonl(
                session,
                settings,
                tenant=batch.tenant,
                name=name,
                records=records,
                purpose=FilePurpose.BATCH_OUTPUT,
            )
            setattr(batch, field, file_id)
    batch.status, batch.ended_at, batch.holder = status, utcnow(), None
    session.commit()
