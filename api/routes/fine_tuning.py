"""/v1/fine_tuning/jobs: OpenAI's fine-tuning API over the same job table as /v1/jobs (a job's id
is the same on both). Errors are OpenAI's: 400 for a bad body, with ``param`` (api.errors)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query, Request
from sse_starlette import EventSourceResponse

from api.deps import CeleryDep, ReadEngineDep, ReadSessionDep, SessionDep, SettingsDep, TenantDep
from api.routes.jobs import IdempotencyKey, LastEventId
from api.schemas.jobs import ErrorResponse
from api.schemas.openai import (
    FineTuningCheckpointList,
    FineTuningEventList,
    FineTuningJob,
    FineTuningJobCreate,
    FineTuningJobList,
)
from api.services import fine_tuning as ft
from api.services import fine_tuning_create
from api.services import jobs as job_services
from api.services import pause as job_pause
from api.stream.hub import messages
from api.stream.reads import Cursor
from gradacc.errors import JobNotFound
from gradacc.jobs.states import JOB_ID_PATTERN

router = APIRouter(
    prefix="/fine_tuning/jobs",
    tags=["fine-tuning"],
    responses={
        400: {"model": ErrorResponse, "description": "A field is wrong; error.param names it"},
        401: {"model": ErrorResponse},
        404: {"model": ErrorResponse},
    },
)
Limit = Annotated[int, Query(ge=1, le=100)]
After = Annotated[str | None, Query(min_length=1, max_length=128)]


@router.post(
    "",
    response_model=FineTuningJob,
    summary="Create a fine-tuning job (OpenAI's API)",
    description="OpenAI's body (model, training_file, validation_file, method, suffix, seed, "
    "metadata); our own fields (backend, K, LoRA, precision) in `gradacc`. Queued at once; "
    "`Idempotency-Key` makes a retry return the same job.",
    responses={429: {"model": ErrorResponse}, 503: {"model": ErrorResponse}},
)
def create_fine_tuning_job(
    body: FineTuningJobCreate,
    session: SessionDep,
    celery: CeleryDep,
    settings: SettingsDep,
    tenant: TenantDep,
    idempotency_key: IdempotencyKey = None,
) -> FineTuningJob:
    job = fine_tuning_create.create(
        session,
        body=body,
        tenant=tenant,
        idempotency_key=idempotency_key,
        celery=celery,
        settings=settings,
    )
    return ft.to_openai(job)


@router.get("", response_model=FineTuningJobList, summary="List fine-tuning jobs")
async def list_fine_tuning_jobs(
    request: Request,
    session: ReadSessionDep,
    tenant: TenantDep,
    limit: Limit = 20,
    after: Annotated[str | None, Query(pattern=JOB_ID_PATTERN)] = None,
) -> FineTuningJobList:
    """Newest first; `after` a job id; `metadata[key]=value` keeps the jobs with that pair."""
    metadata = ft.metadata_filters(list(request.query_params.multi_items()))
    jobs, more = ft.list_fine_tuning_jobs(
        session, tenant=tenant, after=after, limit=limit, metadata=metadata
    )
    return FineTuningJobList(data=[ft.to_openai(j) for j in jobs], has_more=more)


@router.get(
    "/{job_id}",
    response_model=FineTuningJob,
    summary="Retrieve a fine-tuning job",
    description="Its status, hyperparameters as resolved, trained tokens, result files, "
    "`fine_tuned_model` once it succeeded, and the error if it failed.",
)
async def retrieve_fine_tuning_job(
    job_id: str, session: ReadSessionDep, tenant: TenantDep
) -> FineTuningJob:
    return ft.to_openai(ft.get_fine_tuning_job(session, job_id=job_id, tenant=tenant))


@router.post(
    "/{job_id}/cancel",
    response_model=FineTuningJob,
    responses={409: {"model": ErrorResponse}},
    summary="Cancel a fine-tuning job",
    description="Queued, running or paused: cancelled (a running one stops within a window). "
    "Already finished: 409.",
)
def cancel_fine_tuning_job(job_id: str, session: SessionDep, tenant: TenantDep) -> FineTuningJob:
    ft.get_fine_tuning_job(session, job_id=job_id, tenant=tenant)
    return ft.to_openai(job_services.cancel_job(session, job_id=job_id, tenant=tenant))


@router.post(
    "/{job_id}/pause",
    response_model=FineTuningJob,
    responses={409: {"model": ErrorResponse}},
    summary="Pause a fine-tuning job: checkpoint at the next window boundary, release the device",
    description="Running: it checkpoints at the next window boundary and releases its device. "
    "Queued: it waits, paused. Anything else: 409. Resume continues from the checkpoint.",
)
def pause_fine_tuning_job(job_id: str, session: SessionDep, tenant: TenantDep) -> FineTuningJob:
    ft.get_fine_tuning_job(session, job_id=job_id, tenant=tenant)
    return ft.to_openai(job_pause.pause_job(session, job_id=job_id, tenant=tenant))


@router.post(
    "/{job_id}/resume",
    response_model=FineTuningJob,
    responses={409: {"model": ErrorResponse}},
    summary="Resume a paused fine-tuning job from its checkpoint",
    description="Paused: queued again, and it continues from its checkpoint with the same "
    "result as an uninterrupted run. Anything else: 409.",
)
def resume_fine_tuning_job(
    job_id: str, session: SessionDep, celery: CeleryDep, settings: SettingsDep, tenant: TenantDep
) -> FineTuningJob:
    ft.get_fine_tuning_job(session, job_id=job_id, tenant=tenant)
    job = job_pause.resume_job(
        session, job_id=job_id, tenant=tenant, celery=celery, settings=settings
    )
    return ft.to_openai(job)


@router.get(
    "/{job_id}/stream",
    response_class=EventSourceResponse,
    summary="Its live stream (Server-Sent Events; gradacc's, not OpenAI's)",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"},
        429: {"model": ErrorResponse, "description": "Too many streams open"},
    },
)
async def stream_fine_tuning_job(
    job_id: str,
    request: Request,
    engine: ReadEngineDep,
    tenant: TenantDep,
    settings: SettingsDep,
    last_event_id: LastEventId = "",
) -> EventSourceResponse:
    """As /v1/jobs/{job_id}/stream, but each `job` message is the fine_tuning.job object that
    retrieve returns."""
    since = Cursor.parse(last_event_id) if last_event_id else Cursor()
    row = await asyncio.to_thread(job_services.read_job, engine, job_id=job_id, tenant=tenant)
    if row.fine_tuning is None:  # a /v1/jobs job: not on this API
        raise JobNotFound(job_id)
    slot = request.app.state.stream_hub.take_slot(tenant, limit=settings.max_streams_per_tenant)
    stream = messages(
        request.app.state.stream_hub,
        job_id=job_id,
        row=row,
        since=since,
        slot=slot,
        shape="fine_tuning.job",
    )
    return EventSourceResponse(stream, ping=15)


@router.get("/{job_id}/events", response_model=FineTuningEventList, summary="List its events")
async def list_fine_tuning_events(
    job_id: str, session: ReadSessionDep, tenant: TenantDep, after: After = None, limit: Limit = 20
) -> FineTuningEventList:
    """Newest first, as OpenAI lists them; `type` metrics events carry the step records."""
    job = ft.get_fine_tuning_job(session, job_id=job_id, tenant=tenant)
    events, more = ft.list_events(session, job=job, after=after, limit=limit)
    return FineTuningEventList(data=events, has_more=more)


@router.get(
    "/{job_id}/checkpoints", response_model=FineTuningCheckpointList, summary="List checkpoints"
)
async def list_fine_tuning_checkpoints(
    job_id: str,
    session: ReadSessionDep,
    settings: SettingsDep,
    tenant: TenantDep,
    after: After = None,
    limit: Limit = 10,
) -> FineTuningCheckpointList:
    """The kept checkpoints, newest first; each is usable as `model` (fine-tune it again)."""
    job = ft.get_fine_tuning_job(session, job_id=job_id, tenant=tenant)
    page, more = ft.list_checkpoints(session, settings, job=job, after=after, limit=limit)
    first, last = (page[0].id, page[-1].id) if page else (None, None)
    return FineTuningCheckpointList(data=page, has_more=more, first_id=first, last_id=last)
