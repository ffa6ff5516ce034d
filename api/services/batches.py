"""/v1/batches: a batch is created on the tenant's batch file and queued for the workers' batch
runners (``worker.consumer.batch_runner``), read back with its line counts, listed, cancelled."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.schemas.batches import BatchCreate, BatchObject, RequestCounts
from gradacc.batches import store
from gradacc.errors import BatchNotFound, FileNotFound, InvalidRequest
from gradacc.ids import time_ordered_id
from gradacc.tables import Batch, BatchStatus, File, FilePurpose, utcnow

ENDED_AT = {
    BatchStatus.COMPLETED: "completed_at",
    BatchStatus.FAILED: "failed_at",
    BatchStatus.EXPIRED: "expired_at",
    BatchStatus.CANCELLED: "cancelled_at",
}


def _seconds(at: datetime | None) -> int | None:
    return int(at.timestamp()) if at is not None else None


def view(session: Session, batch: Batch) -> BatchObject:
    completed, failed = store.counts(session, batch.id)
    ended: dict[str, int | None] = {field: None for field in ENDED_AT.values()}
    if batch.status in ENDED_AT:
        ended[ENDED_AT[BatchStatus(batch.status)]] = _seconds(batch.ended_at)
    errors = {"object": "list", "data": batch.errors} if batch.errors else None
    return BatchObject(
        id=batch.id,
        endpoint=batch.endpoint,
        input_file_id=batch.input_file_id,
        completion_window=batch.completion_window,
        status=batch.status,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        errors=errors,
        created_at=int(batch.created_at.timestamp()),
        in_progress_at=_seconds(batch.in_progress_at),
        expires_at=int(batch.expires_at.timestamp()),
        finalizing_at=_seconds(batch.finalizing_at),
        cancelling_at=_seconds(batch.cancelling_at),
        metadata=batch.metadata_,
        request_counts=RequestCounts(total=batch.total, completed=completed, failed=failed),
        **ended,
    )


def create(session: Session, body: BatchCreate, tenant: str) -> BatchObject:
    file = session.get(File, body.input_file_id)
    if file is None or file.tenant != tenant:
        raise FileNotFound(body.input_file_id)
    if file.purpose != FilePurpose.BATCH:
        raise InvalidRequest(
            f"{file.id} was uploaded with purpose {file.purpose!r}; a batch's input has purpose "
            "'batch'",
            param="input_file_id",
        )
    hours = int(body.completion_window.removesuffix("h"))
    now = utcnow()
    batch = Batch(
        id=time_ordered_id("batch_"),
        tenant=tenant,
        input_file_id=file.id,
        endpoint=body.endpoint,
        completion_window=body.completion_window,
        status=BatchStatus.VALIDATING,
        total=int(file.details.get("lines", 0)),
        metadata_=body.metadata,
        created_at=now,
        expires_at=now + timedelta(hours=hours),
    )
    session.add(batch)
    session.commit()
    return view(session, batch)


def get(session: Session, batch_id: str, tenant: str) -> Batch:
    batch = session.get(Batch, batch_id)
    if batch is None or batch.tenant != tenant:
        raise BatchNotFound(batch_id)
    return batch


def cancel(session: Session, batch_id: str, tenant: str) -> BatchObject:
    """A running batch goes to ``cancelling``; its runner ends it ``cancelled`` before its next
    line, with the files of what it answered. An ended batch is as it was."""
    batch = get(session, batch_id, tenant)
    if batch.status in store.RUNNING and batch.status != BatchStatus.CANCELLING:
        batch.status, batch.cancelling_at = BatchStatus.CANCELLING, utcnow()
        session.commit()
    return view(session, batch)


def list_batches(
    session: Session, tenant: str, *, after: str | None, limit: int
) -> tuple[list[BatchObject], bool]:
    query = select(Batch).where(Batch.tenant == tenant)
    if after is not None:
        query = query.where(Batch.id < after)
    found = list(session.scalars(query.order_by(Batch.id.desc()).limit(limit + 1)))
    return [view(session, b) for b in found[:limit]], len(found) > limit
