"""/v1/jobs: create, read, list, metrics, events, stream, cancel, pause, resume. Reads are
async (no thread-pool hop)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Query, Request, Response
from sse_starlette import EventSourceResponse

from api.deps import (
    CeleryDep,
    ReadEngineDep,
    ReadSessionDep,
    SessionDep,
    SettingsDep,
    TenantDep,
)
from api.schemas.jobs import (
    ErrorResponse,
    EventList,
    JobCreate,
    JobDeleted,
    JobList,
    JobRead,
    MetricsList,
)
from api.services import jobs as job_services
from api.services import pause as job_pause
from api.services.artifacts import evaluations
from api.services.fine_tuning import metadata_filters
from api.services.queue import spot_of, spots_of
from api.stream.hub import StreamHub, messages
from api.stream.reads import Cursor
from gradacc.jobs.states import JOB_ID_PATTERN
from gradacc.tables import JobStatus
from trainer_core.spec.job import example_spec

router = APIRouter(
    prefix="/jobs",
    tags=["jobs"],
    responses={
        401: {"model": ErrorResponse},
        404: {"model": ErrorResponse},
        422: {"model": ErrorResponse},
        503: {"model": ErrorResponse},
    },
)

EXAMPLES: dict[str, Any] = {
    "tiny": {"summary": "A tiny job that trains in seconds on a CPU", "value": example_spec()},
}


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=r"^[\x21-\x7e]+$",
        description="Same key and body: the same job again (200). Same key, other body: 409.",
    ),
]


@router.post(
    "",
    response_model=JobRead,
    status_code=201,
    summary="Submit a training job",
    description="Validates the spec (every error at once, in `error.errors`), stores the job as "
    "queued and enqueues it. 201: created. 200: the job created earlier with this "
    "Idempotency-Key and body.",
    responses={
        200: {"model": JobRead, "description": "Replayed: the job of this Idempotency-Key"},
        409: {"model": ErrorResponse, "description": "Idempotency-Key used with another body"},
        429: {"model": ErrorResponse, "description": "Too many jobs queued or running"},
    },
)
def create_job(
    spec: Annotated[JobCreate, Body(openapi_examples=EXAMPLES)],
    session: SessionDep,
    celery: CeleryDep,
    settings: SettingsDep,
    tenant: TenantDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobRead:
    job, created = job_services.create_job(
        session,
        spec=spec,
        tenant=tenant,
        idempotency_key=idempotency_key,
        celery=celery,
        settings=settings,
    )
    response.status_code = 201 if created else 200
    spot = spots_of(session, jobs=[job], settings=settings).get(job.id)
    return JobRead.of(job, spot)


@router.get(
    "",
    response_model=JobList,
    summary="List your jobs",
    description="Newest first, `limit` at a time; pass `last_id` as `after` for the next page. "
    "`name` and `metadata[key]=value` (repeatable) filter.",
)
async def list_jobs(
    request: Request,
    session: ReadSessionDep,
    settings: SettingsDep,
    tenant: TenantDep,
    status: JobStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[
        str | None, Query(pattern=JOB_ID_PATTERN, description="A job id (last_id)")
    ] = None,
    name: Annotated[str | None, Query(max_length=128, description="Jobs of this name")] = None,
) -> JobList:
    """``metadata[key]=value`` (repeatable) keeps the jobs with each pair."""
    metadata = metadata_filters(list(request.query_params.multi_items()))
    jobs, has_more = job_services.list_jobs(
        session,
        tenant=tenant,
        status=status,
        limit=limit,
        after=after,
        name=name,
        metadata=metadata,
    )
    last_id = jobs[-1].id if jobs else None
    spots = spots_of(session, jobs=jobs, settings=settings)
    data = [JobRead.of(j, spots.get(j.id)) for j in jobs]
    return JobList(data=data, has_more=has_more, last_id=last_id)


@router.get(
    "/{job_id}",
    response_model=JobRead,
    summary="Read a job",
    description="Status, progress, the latest epoch's metrics, the error if any, the outputs on "
    "disk and, once finished, the run's summary. Queued: its queue_position and "
    "estimated_start.",
)
async def get_job(
    job_id: str, engine: ReadEngineDep, settings: SettingsDep, tenant: TenantDep
) -> Response:
    # The poll endpoint: serialised once by pydantic, skipping FastAPI's second validation pass.
    row = job_services.read_job(engine, job_id=job_id, tenant=tenant)
    spot = spot_of(engine, job_id=row.id, status=row.status, settings=settings)
    job = JobRead.of(row, spot)
    return Response(job.model_dump_json(), media_type="application/json")


@router.get(
    "/{job_id}/metrics",
    response_model=MetricsList,
    summary="A job's metrics, per epoch, per logging step or per evaluation",
    description="granularity=epoch (default): one record per finished epoch, in order. "
    "granularity=step: one record every logging_steps optimizer steps, in pages "
    "(after=the last page's last_step). granularity=evaluation: each evaluation's report, "
    "newest first (up to limit): its step, epoch and scores, and for a classifier per-class "
    "precision, recall, F1 and support, the confusion matrix and misclassified rows, for a "
    "causal LM greedy samples (prompt, reference, output; null when the time budget skipped "
    "them).",
)
async def list_metrics(
    job_id: str,
    engine: ReadEngineDep,
    settings: SettingsDep,
    tenant: TenantDep,
    granularity: Literal["epoch", "step", "evaluation"] = "epoch",
    after: Annotated[int, Query(ge=0, le=2**31 - 1, description="step pages: a step")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="step pages: records")] = 1000,
) -> Response:
    if granularity == "epoch":
        page = MetricsList(data=job_services.list_metrics(engine, job_id=job_id, tenant=tenant))
    elif granularity == "evaluation":
        job_services.read_job(engine, job_id=job_id, tenant=tenant)
        reports, more = evaluations(settings.jobs_dir / job_id, limit=limit)
        page = MetricsList(data=reports, has_more=more)
    else:
        records, has_more = job_services.list_step_metrics(
            engine, job_id=job_id, tenant=tenant, after=after, limit=limit
        )
        last = records[-1]["step"] if records else None
        page = MetricsList(data=records, has_more=has_more, last_step=last)
    return Response(page.model_dump_json(), media_type="application/json")


# A string, never null: an absent header is "", so a client cannot send the text "null".
LastEventId = Annotated[
    str,
    Header(
        alias="Last-Event-ID",
        pattern=r"^(\d{1,18}-\d{1,18}-\d{1,18})?$",
        description="Resume after this message (the id of the last one received)",
    ),
]


@router.get(
    "/{job_id}/stream",
    response_class=EventSourceResponse,
    summary="A job's live stream (Server-Sent Events)",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"},
        429: {"model": ErrorResponse, "description": "Too many streams open"},
    },
)
async def stream_job(
    job_id: str,
    request: Request,
    engine: ReadEngineDep,
    tenant: TenantDep,
    settings: SettingsDep,
    last_event_id: LastEventId = "",
) -> EventSourceResponse:
    """Events `event`, `epoch`, `step` and `job` (status and progress); ends after the final
    status. Each message's id resumes the stream as `Last-Event-ID`. A tenant holds at most
    GRADACC_MAX_STREAMS_PER_TENANT streams of an API process at once (more: 429)."""
    since = Cursor.parse(last_event_id) if last_event_id else Cursor()
    row = await asyncio.to_thread(job_services.read_job, engine, job_id=job_id, tenant=tenant)
    hub: StreamHub = request.app.state.stream_hub
    slot = hub.take_slot(tenant, limit=settings.max_streams_per_tenant)
    stream = messages(hub, job_id=job_id, row=row, since=since, slot=slot)
    return EventSourceResponse(stream, ping=15)


@router.get(
    "/{job_id}/events",
    response_model=EventList,
    summary="A job's events",
    description="What happened to the job (queued, started, preempted, ...), oldest first.",
)
async def list_events(job_id: str, session: ReadSessionDep, tenant: TenantDep) -> EventList:
    return EventList.of(job_services.list_events(session, job_id=job_id, tenant=tenant))


@router.post(
    "/{job_id}/cancel",
    response_model=JobRead,
    summary="Cancel a job",
    description="Queued: cancelled at once. Running: its training process is stopped within "
    "seconds. Finished: 409.",
    responses={409: {"model": ErrorResponse, "description": "The job has already finished"}},
)
def cancel_job(job_id: str, session: SessionDep, tenant: TenantDep) -> JobRead:
    return JobRead.of(job_services.cancel_job(session, job_id=job_id, tenant=tenant))


@router.post(
    "/{job_id}/pause",
    response_model=JobRead,
    summary="Pause a job",
    description="Running: it checkpoints at the next window boundary and releases its device. "
    "Queued: it waits, paused. Anything else: 409.",
    responses={409: {"model": ErrorResponse, "description": "Not queued or running"}},
)
def pause_job(job_id: str, session: SessionDep, tenant: TenantDep) -> JobRead:
    return JobRead.of(job_pause.pause_job(session, job_id=job_id, tenant=tenant))


@router.post(
    "/{job_id}/resume",
    response_model=JobRead,
    summary="Resume a paused job",
    description="Queued again, to go on from its checkpoint (while its worker still lets go of "
    "it: queued as it does). Not paused: 409. Over GRADACC_MAX_QUEUED_PER_TENANT: 429.",
    responses={
        409: {"model": ErrorResponse, "description": "The job is not paused"},
        429: {"model": ErrorResponse, "description": "Too many jobs waiting"},
    },
)
def resume_job(
    job_id: str, session: SessionDep, celery: CeleryDep, settings: SettingsDep, tenant: TenantDep
) -> JobRead:
    job = job_pause.resume_job(
        session, job_id=job_id, tenant=tenant, celery=celery, settings=settings
    )
    return JobRead.of(job)


@router.delete(
    "/{job_id}",
    response_model=JobDeleted,
    summary="Delete a finished job",
    description="Deletes a finished job's rows and outputs. Queued or running: 409, cancel first.",
    responses={409: {"model": ErrorResponse, "description": "The job is queued or running"}},
)
def delete_job(
    job_id: str, session: SessionDep, settings: SettingsDep, tenant: TenantDep
) -> JobDeleted:
    """A finished job's rows and outputs. Queued or running: 409, cancel it first."""
    job_services.delete_job(session, settings=settings, job_id=job_id, tenant=tenant)
    return JobDeleted(id=job_id)
