"""/healthz: the process answers. /readyz: the database and the broker answer too."""

from __future__ import annotations

from fastapi import APIRouter

from api import services
from api.deps import CeleryDep, SessionDep
from api.schemas import ErrorResponse, Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"model": ErrorResponse}})
def readyz(session: SessionDep, celery: CeleryDep) -> Health:
    return Health(status="ready", checks=services.check_readiness(session, celery=celery))
