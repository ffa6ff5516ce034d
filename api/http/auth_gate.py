"""Authentication before anything else on ``/v1``: with ``require_auth`` on, a request without a
valid bearer key is 401 whatever its method, path or body, because it is checked before routing,
body size or body parsing. The tenant found is left in ``request.state.tenant``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import error_response
from api.http.body_limit import drain
from gradacc.auth import KeyCache
from gradacc.db import DATABASE_ERRORS

log = logging.getLogger(__name__)

PROTECTED_PREFIXES = ("/v1", "/api/v1")  # the second: the Tinker API (api.routes.tinker)
TINKER_KEY_PREFIX = "tml-"


def bearer_token(scope: Scope) -> str | None:
    """The key of ``Authorization: Bearer <key>``, or of ``X-API-Key: tml-<key>`` (the Tinker
    SDK's form: its client refuses a key without the prefix, so ``tml-`` + a gradacc key is that
    key)."""
    headers: dict[bytes, bytes] = dict(scope["headers"])
    raw = headers.get(b"authorization", b"").decode("latin-1")
    scheme, _, token = raw.partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        return token
    tinker = headers.get(b"x-api-key", b"").decode("latin-1").strip()
    path: str = scope.get("path", "")
    if path.startswith("/api/v1") and tinker.startswith(TINKER_KEY_PREFIX):
        return tinker.removeprefix(TINKER_KEY_PREFIX) or None
    return None


class RequireAuth:
    def __init__(
        self, app: ASGIApp, *, key_cache: KeyCache, new_session: Callable[[], Session]
    ) -> None:
        self.app = app
        self.key_cache = key_cache
        self.new_session = new_session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith(PROTECTED_PREFIXES):
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope)
        if token is None:
            await self._refuse(scope, receive, send, "an API key is required: Bearer <key>")
            return
        try:
            tenant = self.key_cache.tenant_of(self.new_session, token=token)
        except DATABASE_ERRORS as exc:
            log.warning("database unavailable during auth: %s", type(exc).__name__)
            message = "the database is unavailable; retry later"
            await error_response(503, "database_unavailable", message)(scope, receive, send)
            return
        if tenant is None:
            await self._refuse(scope, receive, send, "invalid API key")
            return
        scope.setdefault("state", {})["tenant"] = tenant
        await self.app(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, message: str) -> None:
        await drain(receive)  # answer a client that sent its whole body (see api.http.body_limit)
        response = error_response(401, "unauthorized", message, "Authorization")
        await response(scope, receive, send)
