"""/v1/distillations: sample a teacher (any model served here or routed upstream) on a prompt
file into a chat training file; then fine-tune on it as on any file (docs/migrating.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from api.deps import ReadSessionDep, SessionDep, SettingsDep, TenantDep
from api.schemas.distillations import DistillationCreate, DistillationList, DistillationObject
from api.schemas.jobs import ErrorResponse
from api.services import distillations as services

router = APIRouter(prefix="/distillations", tags=["distillations"])
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404)
}


@router.post(
    "", response_model=DistillationObject, responses=ERRORS, summary="Create a distillation"
)
def create_distillation(
    body: DistillationCreate, session: SessionDep, settings: SettingsDep, tenant: TenantDep
) -> DistillationObject:
    """Every prompt row is checked first (a bad one is a 400 naming its line). The workers ask
    the teacher one row at a time, each answer kept as it comes: `queued` → `in_progress` →
    `completed` with `output_file_id`, a `fine-tune` file of the prompts and their answers.
    `progress` and `usage` (the teacher's tokens) grow as it goes. A worker that dies loses no
    answer, and no finished row is asked again."""
    return services.create(session, settings, body, tenant)


@router.get("", response_model=DistillationList, responses=ERRORS, summary="List distillations")
def list_distillations(
    session: ReadSessionDep,
    tenant: TenantDep,
    after: str | None = Query(default=None, max_length=64),
    limit: int = Query(default=20, ge=1, le=100),
) -> DistillationList:
    """Newest first; page with `after` = `last_id`."""
    data, more = services.list_all(session, tenant, after=after, limit=limit)
    return DistillationList(
        data=data,
        has_more=more,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
    )


@router.get(
    "/{distillation_id}",
    response_model=DistillationObject,
    responses=ERRORS,
    summary="Retrieve a distillation",
)
def retrieve_distillation(
    distillation_id: str, session: ReadSessionDep, tenant: TenantDep
) -> DistillationObject:
    """Its status, `progress` (rows done and refused of total), the teacher's `usage` in tokens,
    `row_errors` by prompt line, and `output_file_id` once it has ended."""
    return services.view(session, services.get(session, distillation_id, tenant))


@router.post(
    "/{distillation_id}/cancel",
    response_model=DistillationObject,
    responses=ERRORS,
    summary="Cancel a distillation",
)
def cancel_distillation(
    distillation_id: str, session: SessionDep, tenant: TenantDep
) -> DistillationObject:
    """It stops before its next row; the answers so far become its training file."""
    return services.cancel(session, distillation_id, tenant)
