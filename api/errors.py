"""One error shape everywhere: ``{"error": {"code", "message", "param"}}``, mapped in one place."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from gradacc.db import DATABASE_ERRORS
from gradacc.errors import (
    ArtifactNotFound,
    DomainError,
    FileInUse,
    FileNotFound,
    IdempotencyConflict,
    InvalidRequest,
    InvalidTransition,
    JobActive,
    JobNotFound,
    NotReady,
    TooManyJobs,
    Unauthorized,
)

log = logging.getLogger(__name__)

STATUS_OF: dict[type[DomainError], int] = {
    InvalidRequest: 422,
    Unauthorized: 401,
    JobNotFound: 404,
    FileNotFound: 404,
    ArtifactNotFound: 404,
    InvalidTransition: 409,
    FileInUse: 409,
    JobActive: 409,
    IdempotencyConflict: 409,
    TooManyJobs: 429,
    NotReady: 503,
}
_LOCATIONS = {"body", "query", "path", "header"}
_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    416: "range_not_satisfiable",
}


class AsciiJSONResponse(JSONResponse):
    """Escapes non-ASCII: a message that echoes a field name with a lone surrogate (valid JSON
    escape, invalid UTF-8) must not turn a 4xx into a 500 while rendering."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(status: int, code: str, message: str, param: str | None = None) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "param": param}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return AsciiJSONResponse(status_code=status, content=body, headers=headers)


def _param_of(loc: tuple[Any, ...] | list[Any]) -> str | None:
    parts = [str(p) for p in loc if p not in _LOCATIONS]
    return ".".join(parts) or None


async def on_domain_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DomainError)
    return error_response(STATUS_OF.get(type(exc), 400), exc.code, exc.message, exc.param)


async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0]
    if first.get("type") == "json_invalid":
        return error_response(422, "invalid_json", "the request body is not valid JSON")
    param = _param_of(first.get("loc", ()))
    message = str(first.get("msg", "invalid request"))
    if param:
        message = f"{param}: {message}"
    return error_response(422, "invalid_request", message, param)


async def on_http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail))


async def on_database_unavailable(_: Request, exc: Exception) -> JSONResponse:
    # No driver text: it can carry the host, the user or the database name.
    log.warning("database unavailable: %s", type(exc).__name__)
    return error_response(503, "database_unavailable", "the database is unavailable; retry later")


async def on_unexpected_error(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, on_domain_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    for unavailable in DATABASE_ERRORS:
        app.add_exception_handler(unavailable, on_database_unavailable)
    app.add_exception_handler(Exception, on_unexpected_error)
