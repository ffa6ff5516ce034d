"""One error shape everywhere: ``{"error": {"code", "message", "param"}}``, mapped in one place."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from gradacc.errors import DomainError, InvalidTransition, JobNotFound, NotReady

log = logging.getLogger(__name__)

STATUS_OF: dict[type[DomainError], int] = {JobNotFound: 404, InvalidTransition: 409, NotReady: 503}
_LOCATIONS = {"body", "query", "path", "header"}


def error_response(status: int, code: str, message: str, param: str | None = None) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "param": param}}
    return JSONResponse(status_code=status, content=body)


def _param_of(loc: tuple[Any, ...] | list[Any]) -> str | None:
    parts = [str(p) for p in loc if p not in _LOCATIONS]
    return ".".join(parts) or None


async def on_domain_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DomainError)
    return error_response(STATUS_OF.get(type(exc), 400), exc.code, exc.message, exc.param)


async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0]
    param = _param_of(first.get("loc", ()))
    message = str(first.get("msg", "invalid request"))
    if param:
        message = f"{param}: {message}"
    return error_response(422, "invalid_request", message, param)


async def on_http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail))


async def on_unexpected_error(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, on_domain_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected_error)
