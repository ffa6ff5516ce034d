"""/v1/workers: the workers alive now, for operators."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import ReadSessionDep, SettingsDep, TenantDep
from api.schemas.jobs import ErrorResponse, WorkerList, WorkerRead
from api.services import workers as worker_services

router = APIRouter(prefix="/workers", tags=["workers"])


@router.get(
    "",
    response_model=WorkerList,
    summary="List the live workers",
    description="Name, devices, current job and last heartbeat of each worker alive now. "
    "A job of another tenant shows as null.",
    responses={401: {"model": ErrorResponse}, 503: {"model": ErrorResponse}},
)
def list_workers(session: ReadSessionDep, settings: SettingsDep, tenant: TenantDep) -> WorkerList:
    workers, own_jobs = worker_services.list_workers_for(session, settings=settings, tenant=tenant)
    return WorkerList(data=[WorkerRead.of(w, show_job=w.current_job in own_jobs) for w in workers])
