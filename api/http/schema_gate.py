"""Refuse to serve a database whose schema is not the latest (``gradacc migrate`` not run): every
request but liveness and the docs gets 503 ``not_migrated`` naming the command, instead of a
traceback per request from a missing table. Checked once per process until it passes (at most
once a second while it does not); afterwards it costs nothing."""

from __future__ import annotations

import asyncio
import logging
import time

from sqlalchemy import Engine
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import error_response
from api.http.body_limit import drain
from gradacc.db import DATABASE_ERRORS
from gradacc.migrate import schema_problem

log = logging.getLogger(__name__)
OPEN_PATHS = ("/healthz", "/docs", "/redoc", "/openapi.json", "/static")
RECHECK_S = 1.0


class SchemaGate:
    def __init__(self, app: ASGIApp, *, engine: Engine) -> None:
        self.app, self.engine = app, engine
        self.ok = False
        self.problem: str | None = None
        self.checked_at = -RECHECK_S

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if self.ok or scope["type"] != "http" or path == "/" or path.startswith(OPEN_PATHS):
            await self.app(scope, receive, send)
            return
        if time.monotonic() - self.checked_at >= RECHECK_S:
            await self._check()
        if self.problem is None:
            await self.app(scope, receive, send)
            return
        await drain(receive)
        await error_response(503, "not_migrated", self.problem)(scope, receive, send)

    async def _check(self) -> None:
        self.checked_at = time.monotonic()
        try:
            self.problem = await asyncio.to_thread(schema_problem, self.engine)
        except DATABASE_ERRORS:
            self.problem = None  # unreachable: the request's own 503 says so
            return
        self.ok = self.problem is None
        if self.problem:
            log.warning("not serving: %s", self.problem)
