"""OpenAI's /v1/responses: created through the chat path (``api.services.responses``), kept per
tenant when ``store`` (the default), read back, listed by input item, deleted."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request, Response

from api.deps import ReadSessionDep, SessionDep, SettingsDep, TenantDep
from api.schemas.jobs import ErrorResponse
from api.schemas.responses import InputItemList, ResponseDeleted, ResponseObject
from api.services import responses as response_services
from gradacc.openai.responses_request import ResponseCreateRequest

router = APIRouter(prefix="/responses", tags=["responses"])
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 503, 504)
}
STREAM = {"text/event-stream": {"schema": {"type": "string"}}}


@router.post(
    "",
    response_model=ResponseObject,
    responses=ERRORS | {200: {"content": STREAM}},
    summary="Create a response (OpenAI's Responses API)",
    description="Any model chat completions serve (a base, `ft:…`, a checkpoint, an upstream "
    "route) answers `input` (a string, or message, `function_call` and `function_call_output` "
    "items) after `instructions` and the conversation `previous_response_id` ends: "
    "`max_output_tokens`, `temperature`, `top_p`, function `tools` with `tool_choice`, "
    "`stream` (typed events: `response.created` … `response.output_text.delta` … "
    "`response.completed`), `store` (default true). What is not served (reasoning, built-in "
    "tools, images and files, structured output, background) is a 400 naming it. "
    "docs/openai.md.",
)
async def create_response(
    body: ResponseCreateRequest, request: Request, settings: SettingsDep, tenant: TenantDep
) -> Response:
    return await response_services.create(request.app.state.sessionmaker, settings, body, tenant)


@router.get(
    "/{response_id}",
    response_model=ResponseObject,
    responses=ERRORS,
    summary="Retrieve a stored response",
)
def retrieve_response(response_id: str, session: ReadSessionDep, tenant: TenantDep) -> Any:
    """One of your stored responses (another tenant's, or one made with `store: false`, is a
    404)."""
    return response_services.retrieve(session, response_id, tenant)


@router.delete(
    "/{response_id}",
    response_model=ResponseDeleted,
    responses=ERRORS,
    summary="Delete a stored response",
)
def delete_response(response_id: str, session: SessionDep, tenant: TenantDep) -> ResponseDeleted:
    """A conversation that continued from it can no longer be continued past it."""
    response_services.delete(session, response_id, tenant)
    return ResponseDeleted(id=response_id)


@router.get(
    "/{response_id}/input_items",
    response_model=InputItemList,
    responses=ERRORS,
    summary="List a stored response's input items",
)
def list_input_items(
    response_id: str,
    session: ReadSessionDep,
    tenant: TenantDep,
    after: str | None = Query(default=None, max_length=64),
    limit: int = Query(default=20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
) -> Any:
    """This response's own input items (not its conversation's), each with its id, newest first
    unless `order=asc`; `after` an item id pages on."""
    return response_services.list_input_items(
        session, response_id, tenant, after=after, limit=limit, order=order
    )
