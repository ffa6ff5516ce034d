"""OpenAI's /v1/batches: requests to chat completions, completions and responses answered by the
workers at low priority, their answers in an output file and their errors in an error file
(docs/batches.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from api.deps import ReadSessionDep, SessionDep, TenantDep
from api.schemas.batches import BatchCreate, BatchList, BatchObject
from api.schemas.jobs import ErrorResponse
from api.services import batches as batch_services

router = APIRouter(prefix="/batches", tags=["batches"])
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404)
}


@router.post("", response_model=BatchObject, responses=ERRORS, summary="Create a batch")
def create_batch(body: BatchCreate, session: SessionDep, tenant: TenantDep) -> BatchObject:
    """`input_file_id`: a JSONL file uploaded with purpose `batch`, a request a line
    (`custom_id`, `method` POST, `url`: /v1/chat/completions, /v1/completions or /v1/responses,
    `body`). It goes `validating` → `in_progress` → `completed` (or `expired` past its
    `completion_window`, `cancelling` → `cancelled`, `failed`)."""
    return batch_services.create(session, body, tenant)


@router.get("", response_model=BatchList, responses=ERRORS, summary="List your batches")
def list_batches(
    session: ReadSessionDep,
    tenant: TenantDep,
    after: str | None = Query(default=None, max_length=64),
    limit: int = Query(default=20, ge=1, le=100),
) -> BatchList:
    """Newest first; page with `after` = `last_id`."""
    data, more = batch_services.list_batches(session, tenant, after=after, limit=limit)
    return BatchList(
        data=data,
        has_more=more,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
    )


@router.get("/{batch_id}", response_model=BatchObject, responses=ERRORS, summary="Retrieve a batch")
def retrieve_batch(batch_id: str, session: ReadSessionDep, tenant: TenantDep) -> BatchObject:
    """Its status, `request_counts` (lines answered and failed so far) and, once it has ended,
    `output_file_id` and `error_file_id` (read with /v1/files/{id}/content)."""
    return batch_services.view(session, batch_services.get(session, batch_id, tenant))


@router.post(
    "/{batch_id}/cancel", response_model=BatchObject, responses=ERRORS, summary="Cancel a batch"
)
def cancel_batch(batch_id: str, session: SessionDep, tenant: TenantDep) -> BatchObject:
    """`cancelling` until its runner stops before its next line (`cancelled`); the lines answered
    are kept in its files."""
    return batch_services.cancel(session, batch_id, tenant)
