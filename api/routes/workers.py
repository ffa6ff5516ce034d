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
    description="Devices, current job and last heartbeat of each worker alive now; its name, "
    "host name and pid for operators only (GRADACC_OPERATOR_TENANTS). A job of another tenant "
    "shows as null.",
    responses={401: {"model": ErrorResponse}, 503: {"model": ErrorResponse}},
)
def list_workers(session: ReadSessionDep, settings: SettingsDep, tenant: TenantDep) -> WorkerList:
    workers, own_jobs = worker_services.list_workers_for(session, settings=settings, tenant=tenant)
    host = settings.is_operator(tenant)
    listed = [WorkerRead.of(w, show_job=w.current_job in own_jobs, show_host=host) for w in workers]
    return WorkerList(data=listed)
