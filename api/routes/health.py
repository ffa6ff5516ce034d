"""/healthz: the process answers. /readyz: the database, the broker and a worker answer too."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CeleryDep, SessionDep, SettingsDep
from api.schemas.jobs import ErrorResponse, Health, WorkerRead
from api.services import workers as worker_services

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness: the API process answers")
async def healthz() -> Health:
    """Liveness: the API process answers (nothing else is checked)."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    summary="Readiness: database, broker and at least one live worker",
    description="503 `not_ready` names what cannot be reached; 503 `no_workers` while no worker "
    "is alive (a job accepted then would wait). 200 counts the workers; without API keys it "
    "lists them and their current jobs too (with keys that is /v1/workers, for operators).",
    responses={503: {"model": ErrorResponse, "description": "Not ready"}},
)
def readyz(session: SessionDep, celery: CeleryDep, settings: SettingsDep) -> Health:
    checks, workers = worker_services.check_readiness(session, celery=celery, settings=settings)
    # Unauthenticated: workers are listed only when there are no tenants to keep apart.
    listed = [] if settings.require_auth else [WorkerRead.of(w) for w in workers]
    return Health(status="ready", checks=checks, workers=listed)
