"""One error shape everywhere: ``{"error": {"code", "message", "param", "type"}}`` (OpenAI's, so
its SDK reads our errors), mapped in one place. On the OpenAI-compatible routes (/v1/fine_tuning,
/v1/models, a ``fine-tune`` upload) a validation error is 400, as OpenAI answers it, not 422."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from gradacc.db import DATABASE_ERRORS
from gradacc.errors import (
    ArtifactNotFound,
    BatchNotFound,
    DomainError,
    FileInUse,
    FileNotFound,
    IdempotencyConflict,
    InvalidRequest,
    InvalidTransition,
    JobActive,
    JobBusy,
    JobNotFound,
    ModelNotFound,
    NotAllowed,
    NotReady,
    NotTrained,
    NoWorkers,
    ObjectNotFound,
    OverShare,
    PredictionFailed,
    PredictionTimeout,
    ResponseNotFound,
    StorageQuotaExceeded,
    TooManyJobs,
    TooManyPredictions,
    TooManyStreams,
    Unauthorized,
)
from trainer_core.spec.graders import error_param
from trainer_core.spec.hints import unknown_field_hint

log = logging.getLogger(__name__)

STATUS_OF: dict[type[DomainError], int] = {
    InvalidRequest: 422,
    Unauthorized: 401,
    NotAllowed: 403,
    JobNotFound: 404,
    FileNotFound: 404,
    ModelNotFound: 404,
    ResponseNotFound: 404,
    BatchNotFound: 404,
    ObjectNotFound: 404,
    ArtifactNotFound: 404,
    InvalidTransition: 409,
    FileInUse: 409,
    JobActive: 409,
    JobBusy: 409,
    IdempotencyConflict: 409,
    TooManyJobs: 429,
    StorageQuotaExceeded: 413,
    TooManyStreams: 429,
    NotReady: 503,
    NoWorkers: 503,
    NotTrained: 409,
    PredictionFailed: 500,
    PredictionTimeout: 504,
    TooManyPredictions: 429,
    OverShare: 429,
}
_LOCATIONS = {"body", "query", "path", "header"}
_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
    416: "range_not_satisfiable",
}


class AsciiJSONResponse(JSONResponse):
    """Escapes non-ASCII: a message that echoes a field name with a lone surrogate (valid JSON
    escape, invalid UTF-8) must not turn a 4xx into a 500 while rendering."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


OPENAI_PREFIXES = (
    *("/v1/fine_tuning", "/v1/models", "/v1/chat/completions", "/v1/completions"),
    *("/v1/responses", "/v1/aliases", "/v1/batches", "/v1/evals", "/v1/distillations"),
)
_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


def error_type(status: int) -> str:
    """OpenAI's ``type`` for a status."""
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def openai_status(request: Request, status: int) -> int:
    """422 is 400 where the OpenAI SDK is the client: it raises BadRequestError with .param."""
    if status != 422:
        return status
    openai = request.url.path.startswith(OPENAI_PREFIXES) or getattr(
        request.state, "openai_errors", False
    )
    return 400 if openai else status


def error_response(
    status: int,
    code: str,
    message: str,
    param: str | None = None,
    *,
    errors: list[dict[str, str | None]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    error: dict[str, Any] = {
        "code": code,
        "message": message,
        "param": param,
        "type": error_type(status),
    }
    if errors is not None:
        error["errors"] = errors
    all_headers = dict(headers or {})
    if status == 401:
        all_headers["WWW-Authenticate"] = "Bearer"
    return AsciiJSONResponse(status_code=status, content={"error": error}, headers=all_headers)


# The names pydantic gives the branches of a union in an error's location
# (``batch_size.literal['auto']``, ``.constrained-int``, ``.function-after[...]``): no field's.
_UNION_BRANCH = re.compile(r"^(literal\[.*\]|constrained-\w+|function-[\w-]+\[.*\])$")


def _param_of(loc: tuple[Any, ...] | list[Any]) -> str | None:
    parts = [str(p) for p in loc if p not in _LOCATIONS]
    parts = [parts[0], *(p for p in parts[1:] if not _UNION_BRANCH.match(p))] if parts else []
    if "grader" in parts[1:]:  # a job's grader (grpo.grader): without the union's type tags
        at = parts.index("grader", 1) + 1
        return error_param(tuple(parts[at:]), ".".join(parts[:at]))
    return ".".join(parts) or None


async def on_domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DomainError)
    found = getattr(exc, "errors", None)
    errors = [{"param": exc.param, "message": m} for m in found] if found else None
    status = openai_status(request, STATUS_OF.get(type(exc), 400))
    return error_response(status, exc.code, exc.message, exc.param, errors=errors)


def _field_error(error: Mapping[str, Any]) -> dict[str, str | None]:
    """One pydantic error as ``{param, message}``: no library prefix, a hint for a near miss."""
    param = _param_of(error.get("loc", ()))
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden" and param:
        hint = unknown_field_hint(param.rsplit(".", 1)[-1])
        message = f"unknown field; {hint}" if hint else "unknown field"
    return {"param": param, "message": message}


async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    raw = exc.errors()
    if raw[0].get("type") == "json_invalid":
        status = openai_status(request, 422)
        return error_response(status, "invalid_json", "the request body is not valid JSON")
    got = request.headers.get("content-type", "")
    body_unread = isinstance(raw[0].get("input"), bytes | str) and "json" not in got.lower()
    if body_unread and tuple(raw[0].get("loc", ())) == ("body",):
        # FastAPI reads a body as JSON only with a JSON content type: say so, rather than
        # "Input should be a valid dictionary".
        message = f"send the body as JSON with content-type: application/json (got {got!r})"
        return error_response(415, "unsupported_media_type", message, "content-type")
    errors = [_field_error(error) for error in raw]
    first = errors[0]
    message = f"{first['param']}: {first['message']}" if first["param"] else str(first["message"])
    status = openai_status(request, 422)
    return error_response(status, "invalid_request", message, first["param"], errors=errors)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at this path, found by asking the routes as if the request
    had used it. Starlette's own ``Allow`` names only the first route that matched the path
    (GET /v1/jobs hid POST /v1/jobs). A path some route names exactly (``/v1/files/import``) is
    that route's, not the parameter's beside it (``/v1/files/{file_id}``)."""
    named = request.app.openapi()["paths"].get(request.url.path)
    if named is not None:
        return ", ".join(m for m in _METHODS if m.lower() in named)
    routes = request.app.router.routes
    allowed = [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] == Match.FULL for r in routes)
    ]
    return ", ".join(allowed)


# OpenAI API resources gradacc does not serve: a client that calls one learns that, not a bare
# "Not Found" that reads like a wrong base URL or a missing id.
OPENAI_ELSEWHERE = frozenset(
    {
        *("assistants", "audio", "containers"),
        *("conversations", "embeddings", "fine_tuning/checkpoints"),
        *("images", "moderations", "organization", "realtime", "threads"),
        *("uploads", "vector_stores"),
    }
)

# What it does serve, as that 404 lists it.
SERVED = (
    "chat/completions, completions, responses, batches, evals, models, files (and their import), "
    "fine_tuning jobs (their events and checkpoints) and graders, and gradacc's distillations"
)


def unsupported_openai_route(path: str) -> str | None:
    """The OpenAI resource a ``/v1/…`` path names, when gradacc does not offer it."""
    rest = path.removeprefix("/v1/")
    if rest == path:
        return None
    parts = rest.split("/")
    for resource in ("/".join(parts[:2]), parts[0]):
        if resource in OPENAI_ELSEWHERE:
            return resource
    return None


async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    resource = unsupported_openai_route(request.url.path) if exc.status_code == 404 else None
    if resource is not None:
        message = (
            f"gradacc does not offer OpenAI's /v1/{resource} API; it serves {SERVED} "
            "(docs/openai.md)"
        )
        return error_response(404, "unsupported_openai_route", message, "path")
    # Starlette's headers carry what the status needs (a 401's scheme); a 405 lists them all.
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return error_response(exc.status_code, code, str(exc.detail), headers=headers)


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
