"""A batch's rows: the lease a worker holds it by, its answered lines, and its ending (the output
and error files written from the lines kept, in input order)."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import timedelta
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gradacc.settings import Settings
from gradacc.sources.files import file_dir, new_file_id
from gradacc.tables import Batch, BatchLine, BatchStatus, File, FilePurpose, utcnow

RUNNING = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING)
ENDED = (BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.EXPIRED, BatchStatus.CANCELLED)


def claim(session: Session, *, worker: str, lease_s: float) -> Batch | None:
    """The oldest batch to run that no live worker holds (or this one), held for ``lease_s``.
    Commits."""
    now = utcnow()
    free = or_(Batch.held_until.is_(None), Batch.held_until < now, Batch.holder == worker)
    query = select(Batch.id).where(Batch.status.in_(RUNNING), free).order_by(Batch.id).limit(1)
    found = session.scalar(query.with_for_update(skip_locked=True))
    if found is None:
        session.rollback()
        return None
    # Taken only if still free: SQLite has no row lock, so two workers may both have read it.
    take = update(Batch).where(Batch.id == found, free)
    until = now + timedelta(seconds=lease_s)
    taken = session.execute(take.values(holder=worker, held_until=until)).rowcount  # type: ignore[attr-defined]
    session.commit()
    return session.get(Batch, found, populate_existing=True) if taken == 1 else None


def renew(session: Session, batch_id: str, *, worker: str, lease_s: float) -> str | None:
    """The batch's status, its lease renewed; None when another worker holds it now."""
    until = utcnow() + timedelta(seconds=lease_s)
    stmt = update(Batch).where(Batch.id == batch_id, Batch.holder == worker)
    found = session.execute(stmt.values(held_until=until)).rowcount  # type: ignore[attr-defined]
    session.commit()
    return session.scalar(select(Batch.status).where(Batch.id == batch_id)) if found else None


def done_lines(session: Session, batch_id: str) -> set[int]:
    return set(session.scalars(select(BatchLine.line).where(BatchLine.batch_id == batch_id)))


def keep(session: Session, batch_id: str, line: int, failed: bool, record: Any) -> bool:
    """The line's answer kept (False: it was kept already, by a worker that held the batch
    before). Commits."""
    session.add(BatchLine(batch_id=batch_id, line=line, failed=failed, record=record))
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        return False
    return True


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
            setattr(batch, field, _write(session, settings, batch.tenant, name, records))
    batch.status, batch.ended_at, batch.holder = status, utcnow(), None
    session.commit()


def _write(session: Session, settings: Settings, tenant: str, name: str, records: list[Any]) -> str:
    file_id = new_file_id()
    folder = file_dir(settings, file_id)
    folder.mkdir(parents=True)
    text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    staged = folder / ".partial"
    staged.write_text(text)
    os.replace(staged, folder / "data.jsonl")
    data = text.encode()
    session.add(
        File(
            id=file_id,
            tenant=tenant,
            purpose=FilePurpose.BATCH_OUTPUT,
            filename=name,
            stored_name="data.jsonl",
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            details={"lines": len(records)},
        )
    )
    return file_id
