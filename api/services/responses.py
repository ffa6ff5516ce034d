"""/v1/responses: the request becomes a chat completion (``gradacc.openai.responses_input``), which
goes where chat goes (``api.services.chat``: a worker's predict server or an upstream route, the
tenant's shares held, the model checked as the tenant's), and the answer or its stream comes back
as a response or its typed events (``gradacc.openai.responses_output``). A stored response
(``store``, OpenAI's default) is kept per tenant (``gradacc.tables.StoredResponse``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from fastapi import Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.services import chat as chat_services
from gradacc.errors import InvalidRequest, ResponseNotFound
from gradacc.openai.chat_requests import ChatCompletionRequest
from gradacc.openai.responses_input import chat_body, input_items
from gradacc.openai.responses_output import (
    StreamEvents,
    from_completion,
    new_item_id,
    new_response_id,
    skeleton,
)
from gradacc.openai.responses_request import ResponseCreateRequest
from gradacc.settings import Settings
from gradacc.tables import StoredResponse

MAX_CHAIN = 256  # responses in one conversation by previous_response_id
# A chat field an error names -> the Responses field the client wrote.
PARAMS = {"max_completion_tokens": "max_output_tokens", "messages": "input"}


async def create(
    sessions: sessionmaker[Session], settings: Settings, body: ResponseCreateRequest, tenant: str
) -> Response:
    given = body.model_dump(exclude_none=True)
    given["model"] = await run_in_threadpool(
        chat_services.aliased_model, sessions, settings, body.model, tenant
    )
    items = with_ids(input_items(given["input"]))
    previous = given.get("previous_response_id")
    history = await run_in_threadpool(_history, sessions, previous, tenant) if previous else []
    chat = _chat_request(chat_body(given, history, items))
    response = skeleton(given, new_response_id())
    try:
        answer = await chat_services.complete(
            sessions, settings, path="/chat/completions", body=chat, tenant=tenant, aliased=True
        )
    except InvalidRequest as exc:
        raise _renamed(exc) from None
    if answer.status_code != 200:
        return _renamed_error(answer)
    keep = response["store"]
    if isinstance(answer, StreamingResponse):
        events = _events(answer.body_iterator, StreamEvents(response), sessions, items, tenant)
        return StreamingResponse(
            events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
    from_completion(response, json.loads(bytes(answer.body)))
    if keep:
        await run_in_threadpool(_store, sessions, response, items, tenant)
    return JSONResponse(response)


def _chat_request(body: dict[str, Any]) -> ChatCompletionRequest:
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidRequest(f"{where}: {first['msg']}", param="input") from None


def _responses_param(param: str | None) -> str | None:
    """The Responses field a chat error's ``param`` stands for (None: no renaming)."""
    return PARAMS.get((param or "").split(".")[0])


def _renamed(exc: InvalidRequest) -> InvalidRequest:
    """A chat check's error naming the Responses field the client wrote."""
    renamed = _responses_param(exc.param)
    return exc if renamed is None else InvalidRequest(exc.message, param=renamed)


def _renamed_error(answer: Response) -> Response:
    """The same renaming in an error the model server answered."""
    try:
        found = json.loads(bytes(answer.body))
        renamed = _responses_param(found["error"].get("param"))
        if renamed is not None:
            found["error"]["param"] = renamed
            return JSONResponse(found, status_code=answer.status_code)
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return answer


async def _events(
    chunks: AsyncIterable[Any],
    events: StreamEvents,
    sessions: sessionmaker[Session],
    items: list[dict[str, Any]],
    tenant: str,
) -> AsyncIterator[bytes]:
    """The chat stream's Server-Sent Events read, the Responses events written; the response
    stored once it is complete. The chat stream is closed when the client goes (the model
    server stops), and with it the tenant's share."""
    try:
        for event in events.start():
            yield _sse(event)
        pending = b""
        async for piece in chunks:
            pending += piece if isinstance(piece, bytes) else str(piece).encode()
            *whole, pending = pending.split(b"\n\n")
            for block in whole:
                for event in _chunk_events(block, events):
                    yield _sse(event)
        for event in events.end():
            yield _sse(event)
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
    if events.response["store"] and events.response["status"] != "failed":
        await run_in_threadpool(_store, sessions, events.response, items, tenant)


def _chunk_events(block: bytes, events: StreamEvents) -> list[dict[str, Any]]:
    found = []
    for line in block.decode("utf-8", errors="replace").splitlines():
        data = line.removeprefix("data:").strip()
        if line.startswith("data:") and data and data != "[DONE]":
            found += list(events.chunk(json.loads(data)))
    return found


def _sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def with_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input items as stored and listed (``input_items``): each with an id, a message's
    content as parts (``input_text``; an assistant's ``output_text``)."""
    kept = []
    for item in items:
        item = dict(item)
        kind = item.setdefault("type", "message")
        if kind == "message":
            item.setdefault("id", new_item_id("msg"))
            item.setdefault("status", "completed")
            if isinstance(item.get("content"), str):
                part = "output_text" if item.get("role") == "assistant" else "input_text"
                item["content"] = [{"type": part, "text": item["content"]}]
        else:
            item.setdefault("id", new_item_id({"function_call": "fc"}.get(kind, "fco")))
        kept.append(item)
    return kept


def _store(
    sessions: sessionmaker[Session], response: dict[str, Any], items: list[Any], tenant: str
) -> None:
    with sessions() as session:
        session.add(
            StoredResponse(
                id=response["id"],
                tenant=tenant,
                input_items=items,
                previous_id=response.get("previous_response_id"),
                body=response,
            )
        )
        session.commit()


def _history(sessions: sessionmaker[Session], previous: str, tenant: str) -> list[Any]:
    """The items of the conversation ``previous`` ends, oldest first: each response's input
    items then its output."""
    chain: list[StoredResponse] = []
    with sessions() as session:
        wanted: str | None = previous
        while wanted is not None and len(chain) < MAX_CHAIN:
            row = session.get(StoredResponse, wanted)
            if row is None or row.tenant != tenant:
                raise ResponseNotFound(wanted, param="previous_response_id")
            chain.append(row)
            wanted = row.previous_id
    items: list[Any] = []
    for row in reversed(chain):
        items += list(row.input_items) + list(row.body.get("output") or [])
    return items


def _own(session: Session, response_id: str, tenant: str) -> StoredResponse:
    row = session.get(StoredResponse, response_id)
    if row is None or row.tenant != tenant:
        raise ResponseNotFound(response_id)
    return row


def retrieve(session: Session, response_id: str, tenant: str) -> dict[str, Any]:
    return dict(_own(session, response_id, tenant).body)


def delete(session: Session, response_id: str, tenant: str) -> None:
    session.delete(_own(session, response_id, tenant))
    session.commit()


def list_input_items(
    session: Session, response_id: str, tenant: str, *, after: str | None, limit: int, order: str
) -> dict[str, Any]:
    items = list(_own(session, response_id, tenant).input_items)
    if order == "desc":
        items.reverse()
    ids = [item.get("id") for item in items]
    if after is not None:
        if after not in ids:
            raise InvalidRequest(f"no input item {after!r} in this response", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "has_more": len(items) > limit,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
    }
