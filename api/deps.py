"""Request dependencies: the session, the settings and the Celery app of the running app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from celery import Celery
from fastapi import Depends, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from gradacc.errors import Unauthorized
from gradacc.settings import Settings
from gradacc.tables import DEFAULT_TENANT


async def get_session(request: Request) -> AsyncIterator[Session]:
    # An async generator on purpose: a sync one would cost every request a thread-pool hop,
    # which is dearer than the query itself (docs/benchmarks.md). Sync routes still get the session.
    with request.app.state.sessionmaker() as session:
        yield session


async def get_read_session(request: Request) -> AsyncIterator[Session]:
    """For routes that only read: autocommit, so no BEGIN/ROLLBACK round trips per request."""
    with request.app.state.read_sessionmaker() as session:
        yield session


async def get_read_engine(request: Request) -> Engine:
    """For the poll endpoints: no session, no exit stack; the service opens one connection."""
    engine: Engine = request.app.state.read_engine
    return engine


async def get_tenant(request: Request) -> str:
    """The tenant whose jobs this request may see: the bearer key's when auth is on, as found by
    ``api.http.auth_gate.RequireAuth`` before the request got this far."""
    settings: Settings = request.app.state.settings
    if not settings.require_auth:
        return DEFAULT_TENANT
    tenant: str | None = getattr(request.state, "tenant", None)
    if tenant is None:  # a /v1 route outside the gate: refuse rather than serve the default
        raise Unauthorized("an API key is required: Bearer <key>")
    return tenant


async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_celery(request: Request) -> Celery:
    celery: Celery = request.app.state.celery
    return celery


SessionDep = Annotated[Session, Depends(get_session)]
ReadSessionDep = Annotated[Session, Depends(get_read_session)]
ReadEngineDep = Annotated[Engine, Depends(get_read_engine)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
CeleryDep = Annotated[Celery, Depends(get_celery)]
TenantDep = Annotated[str, Depends(get_tenant)]
