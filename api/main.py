"""The FastAPI app: ``uvicorn api.main:app`` (or ``gradacc serve``). Docs at /docs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.errors import install_error_handlers
from api.http.auth_gate import RequireAuth
from api.http.body_limit import BodySizeLimit
from api.http.docs import install_docs
from api.http.host_gate import HostGate
from api.http.openapi import install_openapi
from api.http.prometheus import TimingMiddleware
from api.http.schema_gate import SchemaGate
from api.routes import (
    aliases,
    artifacts,
    batches,
    chat,
    dashboard,
    distillations,
    evals,
    file_imports,
    files,
    fine_tuning,
    graders,
    health,
    jobs,
    models,
    ops,
    predict,
    responses,
    tinker,
    webhook_secret,
    workers,
)
from api.services.files import sweep_leftovers
from api.stream.hub import StreamHub
from gradacc.auth import KeyCache
from gradacc.db import get_read_engine, get_sessionmaker
from gradacc.scheduling.queue import create_celery_app
from gradacc.settings import Settings, get_settings
from gradacc.webhook_sender import WebhookSender

TINKER_CHUNK_BYTES = 6_000_000

log = logging.getLogger(__name__)

DESCRIPTION = """Upload datasets and models, submit a training job (the training core's job spec),
poll its status, progress, per-epoch metrics and events, cancel it, download its model,
checkpoint and log, and list the live workers. Errors always look like
`{"error": {"code": ..., "message": ..., "param": ..., "type": ...}}`; a validation error adds
`errors`, every field at fault as `{param, message}`. `/v1/fine_tuning/jobs`, `/v1/models` and
`purpose=fine-tune` uploads speak OpenAI's fine-tuning API (its SDK works with `base_url`);
there a validation error is 400, as OpenAI answers it. With API keys on, every `/v1` request needs
`Authorization: Bearer <key>` and is refused (401) before anything else is looked at."""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(
        title="gradacc",
        version="0.1.0",
        description=DESCRIPTION,
        docs_url=None,  # served offline by api.http.docs
        redoc_url=None,
        # A body must say it is JSON: a page on another site can send one without a content
        # type (fetch with mode "no-cors") but not with application/json. Refused: 415 (api.errors).
        strict_content_type=True,
        lifespan=_lifespan,
    )
    app.state.settings = settings
    app.state.sessionmaker = get_sessionmaker(settings)
    app.state.read_sessionmaker = get_sessionmaker(settings, autocommit=True)
    app.state.read_engine = get_read_engine(settings.resolved_database_url())
    app.state.stream_hub = StreamHub(app.state.read_engine, settings.stream_poll_interval_s)
    app.state.key_cache = KeyCache(settings.api_key_cache_s)
    app.state.celery = create_celery_app(settings)
    install_error_handlers(app)
    # Uploads stream to disk, so their limit is the upload setting, not the in-memory body one.
    upload_limits = dict.fromkeys(("/v1/files", "/v1/files/import"), settings.max_upload_bytes)
    # A Tinker client sends forward_backward in chunks of up to 5 MB (docs/tinker.md).
    upload_limits["/api/v1/forward_backward"] = max(settings.max_body_bytes, TINKER_CHUNK_BYTES)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, limits=upload_limits)
    app.add_middleware(TimingMiddleware)
    if settings.require_auth:  # before size checks, routing and parsing
        new_session = app.state.read_sessionmaker
        app.add_middleware(RequireAuth, key_cache=app.state.key_cache, new_session=new_session)
    # Added after the others, so it runs before them: no request (an API key's lookup
    # included) reads a database whose schema is not migrated.
    app.add_middleware(SchemaGate, engine=app.state.read_engine)
    hosts = settings.host_patterns()
    if hosts is not None:  # outermost: a rebinding page's request is read no further
        app.add_middleware(HostGate, patterns=hosts)
    app.include_router(health.router)
    app.include_router(dashboard.router)
    app.mount("/static", StaticFiles(directory=dashboard.STATIC_DIR), name="static")
    app.include_router(ops.router)
    app.include_router(jobs.router, prefix="/v1")
    app.include_router(webhook_secret.router, prefix="/v1")
    app.include_router(artifacts.router, prefix="/v1")
    app.include_router(predict.router, prefix="/v1")
    app.include_router(files.router, prefix="/v1")
    app.include_router(file_imports.router, prefix="/v1")
    app.include_router(workers.router, prefix="/v1")
    app.include_router(fine_tuning.router, prefix="/v1")
    app.include_router(graders.router, prefix="/v1")
    app.include_router(models.router, prefix="/v1")
    app.include_router(chat.router, prefix="/v1")
    app.include_router(responses.router, prefix="/v1")
    app.include_router(aliases.router, prefix="/v1")
    app.include_router(batches.router, prefix="/v1")
    app.include_router(evals.router, prefix="/v1")
    app.include_router(distillations.router, prefix="/v1")
    app.include_router(tinker.router)
    app.include_router(tinker.downloads)
    install_docs(app)
    install_openapi(app, settings)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """At start, sweep uploads a killed API process left; then, in the background, send webhooks
    from the outbox (the workers do too)."""
    swept = await asyncio.to_thread(sweep_leftovers, app.state.settings)
    if swept:
        log.info("removed %d partial upload(s) left by an earlier API process", swept)
    sender = WebhookSender(app.state.sessionmaker, app.state.settings)
    sender.start()
    try:
        yield
    finally:
        await sender.stop()


@lru_cache(maxsize=1)
def default_app() -> FastAPI:
    return create_app()


def __getattr__(name: str) -> Any:
    # ``uvicorn api.main:app`` looks the app up by name: build it from the settings on first use.
    if name == "app":
        return default_app()
    raise AttributeError(name)
