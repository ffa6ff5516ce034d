"""A batch's input line made into the request a model server answers, checked as the live routes
check it (``gradacc.openai.chat_checks``), and the answer made into OpenAI's output line.

A line is ``{"custom_id", "method": "POST", "url", "body"}`` with ``url`` one of
``/v1/chat/completions``, ``/v1/completions`` and ``/v1/responses``. What is wrong with a line
(not JSON, a missing field, a body the live route would refuse, a model that is not the
tenant's) makes its error line, with the status the live route would answer; the other lines go
on.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from gradacc.errors import DomainError, InvalidRequest, ModelNotFound
from gradacc.openai.chat_checks import check_served, forwarded_body
from gradacc.openai.chat_requests import ChatCompletionRequest, CompletionRequest
from gradacc.openai.responses_input import chat_body, input_items
from gradacc.openai.responses_output import from_completion, new_response_id, skeleton
from gradacc.openai.responses_request import ResponseCreateRequest
from gradacc.serving.aliases import resolve_alias
from gradacc.serving.resolve import resolve_model
from gradacc.settings import Settings

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
MAX_CUSTOM_ID = 512


class LineError(Exception):
    """A line that cannot be asked: its error line's status, code and message."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param


@dataclass
class Prepared:
    custom_id: str
    path: str  # on a server's /v1: /chat/completions or /completions
    body: dict[str, Any]  # what the model server gets
    model: str  # the model that answers (an alias followed)
    responses: dict[str, Any] | None = None  # a /v1/responses line's request, to answer as one


def custom_id_of(text: str) -> str | None:
    """The line's ``custom_id`` when it can be read at all (for its error line)."""
    try:
        found = json.loads(text).get("custom_id")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def read_line(text: str) -> dict[str, Any]:
    try:
        line = json.loads(text)
    except ValueError:
        raise LineError(400, "invalid_json", "the line is not JSON") from None
    if not isinstance(line, dict):
        raise LineError(400, "invalid_request", "a line is one JSON object")
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not 0 < len(custom_id) <= MAX_CUSTOM_ID:
        raise LineError(400, "invalid_request", "custom_id: a string of 1 to 512 characters")
    if line.get("method") != "POST":
        raise LineError(400, "invalid_request", "method: 'POST'", "method")
    if line.get("url") not in ENDPOINTS:
        raise LineError(
            400, "invalid_url", f"url: one of {', '.join(ENDPOINTS)} (got {line.get('url')!r})"
        )
    if not isinstance(line.get("body"), dict):
        raise LineError(400, "invalid_request", "body: the request's JSON object", "body")
    return line


def prepare(session: Session, settings: Settings, line: dict[str, Any], tenant: str) -> Prepared:
    """The line as a model server's request, or ``LineError``."""
    url, body = line["url"], dict(line["body"])
    if body.get("stream"):
        raise LineError(400, "invalid_request", "stream is not served in a batch", "stream")
    try:
        body["model"] = resolve_alias(
            session, settings.serve_aliases, model=str(body.get("model", "")), tenant=tenant
        )
        if url == "/v1/responses":
            return _responses(session, settings, line["custom_id"], body, tenant)
        kind = ChatCompletionRequest if url == "/v1/chat/completions" else CompletionRequest
        return _chat(session, settings, line["custom_id"], _validated(kind, body), tenant, url)
    except ModelNotFound as exc:
        raise LineError(404, exc.code, exc.message, exc.param) from None
    except DomainError as exc:
        raise LineError(400, exc.code, exc.message, exc.param) from None


def _validated(kind: Any, body: dict[str, Any]) -> Any:
    try:
        return kind.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidRequest(f"{where}: {first['msg']}", param=where) from None


def _chat(
    session: Session,
    settings: Settings,
    custom_id: str,
    request: ChatCompletionRequest | CompletionRequest,
    tenant: str,
    url: str,
) -> Prepared:
    path = url.removeprefix("/v1")
    if settings.serve_upstreams.match(request.model) is not None:
        raise InvalidRequest("a model of an upstream server is not served in a batch yet")
    check_served(request, settings)
    resolve_model(session, settings, model=request.model, tenant=tenant)
    return Prepared(custom_id, path, forwarded_body(request), request.model)


def _responses(
    session: Session, settings: Settings, custom_id: str, body: dict[str, Any], tenant: str
) -> Prepared:
    request = _validated(ResponseCreateRequest, body)
    given = request.model_dump(exclude_none=True)
    if given.get("previous_response_id"):
        raise InvalidRequest("not served in a batch", param="previous_response_id")
    chat = _validated(ChatCompletionRequest, chat_body(given, [], input_items(given["input"])))
    prepared = _chat(session, settings, custom_id, chat, tenant, "/v1/chat/completions")
    prepared.responses = given
    return prepared


def _ids() -> tuple[str, str]:
    return f"batch_req_{secrets.token_hex(12)}", f"req_{secrets.token_hex(12)}"


def answered(prepared: Prepared, status: int, body: Any) -> tuple[bool, dict[str, Any]]:
    """(whether it failed, its output or error line) for the model server's answer."""
    line_id, request_id = _ids()
    if status == 200 and prepared.responses is not None:
        body = from_completion(skeleton(prepared.responses, new_response_id()), body)
        body["model"] = prepared.model
    record = {
        "id": line_id,
        "custom_id": prepared.custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }
    if status != 200:
        error = body.get("error") if isinstance(body, dict) else None
        record["error"] = {
            "code": (error or {}).get("code") or "server_error",
            "message": (error or {}).get("message") or f"answered {status}",
        }
    return status != 200, record


def refused(custom_id: str | None, problem: LineError) -> dict[str, Any]:
    """A line that was never asked: its error line."""
    line_id, request_id = _ids()
    error = {"code": problem.code, "message": problem.message, "param": problem.param}
    body = {"error": error | {"type": "invalid_request_error"}}
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": {"status_code": problem.status, "request_id": request_id, "body": body},
        "error": {"code": problem.code, "message": problem.message},
    }
