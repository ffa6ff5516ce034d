"""/v1/jobs: create, read, list, metrics, events, cancel. Reads are async (no thread-pool hop)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response

from api import services
from api.deps import CeleryDep, ReadSessionDep, SessionDep, SettingsDep
from api.schemas import ErrorResponse, EventList, JobCreate, JobList, JobRead, MetricsList
from gradacc.models import JobStatus
from trainer_core.spec import example_spec

router = APIRouter(
    prefix="/jobs",
    tags=["jobs"],
    responses={404: {"model": ErrorResponse}, 422: {"model": ErrorResponse}},
)

EXAMPLES: dict[str, Any] = {
    "tiny": {"summary": "A tiny job that trains in seconds on a CPU", "value": example_spec()},
}


@router.post("", response_model=JobRead, status_code=201)
def create_job(
    spec: Annotated[JobCreate, Body(openapi_examples=EXAMPLES)],
    session: SessionDep,
    celery: CeleryDep,
    settings: SettingsDep,
) -> JobRead:
    job = services.create_job(session, spec=spec, celery=celery, settings=settings)
    return JobRead.of(job)


@router.get("", response_model=JobList)
async def list_jobs(
    session: ReadSessionDep,
    status: JobStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[str | None, Query(max_length=32, description="A job id (last_id)")] = None,
) -> JobList:
    jobs, has_more = services.list_jobs(session, status=status, limit=limit, after=after)
    last_id = jobs[-1].id if jobs else None
    return JobList(data=[JobRead.of(j) for j in jobs], has_more=has_more, last_id=last_id)


@router.get("/{job_id}", response_model=JobRead)
async def get_job(job_id: str, session: ReadSessionDep) -> Response:
    # The poll endpoint: serialised once by pydantic, skipping FastAPI's second validation pass.
    job = JobRead.of(services.get_job(session, job_id=job_id))
    return Response(job.model_dump_json(), media_type="application/json")


@router.get("/{job_id}/metrics", response_model=MetricsList)
async def list_metrics(job_id: str, session: ReadSessionDep) -> MetricsList:
    return MetricsList.of(services.list_metrics(session, job_id=job_id))


@router.get("/{job_id}/events", response_model=EventList)
async def list_events(job_id: str, session: ReadSessionDep) -> EventList:
    return EventList.of(services.list_events(session, job_id=job_id))


@router.post("/{job_id}/cancel", response_model=JobRead, responses={409: {"model": ErrorResponse}})
def cancel_job(job_id: str, session: SessionDep) -> JobRead:
    return JobRead.of(services.cancel_job(session, job_id=job_id))
