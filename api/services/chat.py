"""/v1/chat/completions and /v1/completions: refuse what is not served (a 400 naming it), check
the model is the tenant's (404 ``model_not_found`` otherwise), then forward the request to a
predict server and pass its answer, or its stream, straight through (``api.services.upstream``).
A model ``GRADACC_SERVE_UPSTREAMS`` sends elsewhere goes to that server instead, as the client
wrote it, with the tenant check still done here. The API loads no model: it only knows where
one is."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.schemas.chat import ChatCompletionRequest, ChatMessage, CompletionRequest
from api.services.upstream import Upstream, forward
from gradacc.errors import InvalidRequest, NoWorkers
from gradacc.serving import TENANT_HEADER, pick_server, resolve_model
from gradacc.settings import Settings
from gradacc.upstreams import OWN_PREFIXES, UpstreamRoute

# OpenAI's fields that would change the answer in ways this server cannot: named when given.
UNSERVED = {
    "tools": "tool calls are not served yet",
    "tool_choice": "tool calls are not served yet",
    "parallel_tool_calls": "tool calls are not served yet",
    "functions": "function calls are not served",
    "function_call": "function calls are not served",
    "audio": "audio output is not served",
    "prediction": "predicted outputs are not served",
    "web_search_options": "web search is not served",
    "reasoning_effort": "these models do not reason apart from their answer",
    "logit_bias": "logit_bias is not served",
    "echo": "echo is not served",
    "suffix": "suffix (insertion) is not served",
}


def _check_served(body: ChatCompletionRequest | CompletionRequest, settings: Settings) -> None:
    given = body.model_dump(exclude_none=True)
    for field, why in UNSERVED.items():
        if field in given and given[field] not in (False, [], {}):
            raise InvalidRequest(why, param=field)
    for field in ("presence_penalty", "frequency_penalty"):
        if given.get(field, 0) != 0:
            raise InvalidRequest("penalties are not served; leave it 0", param=field)
    if given.get("best_of", 1) != 1:
        raise InvalidRequest("best_of is not served; use n", param="best_of")
    if (given.get("response_format") or {"type": "text"}).get("type") != "text":
        raise InvalidRequest("only text answers are served", param="response_format")
    if set(given.get("modalities") or ["text"]) != {"text"}:
        raise InvalidRequest("only text answers are served", param="modalities")
    if given.get("stream_options") and not given.get("stream"):
        raise InvalidRequest("only with stream: true", param="stream_options")
    for field in ("max_completion_tokens", "max_tokens"):
        if given.get(field, 0) > settings.serve_max_completion_tokens:
            raise InvalidRequest(f"at most {settings.serve_max_completion_tokens} "
                                 "(GRADACC_SERVE_MAX_COMPLETION_TOKENS)", param=field)  # fmt: skip


def _plain(message: ChatMessage, index: int) -> dict[str, str]:
    """``{role, content}`` as a chat template reads it: text parts joined, ``developer`` as
    ``system`` (OpenAI treats them alike for models without the distinction)."""
    where = f"messages.{index}"
    if message.role in ("tool", "function") or message.tool_calls or message.function_call:
        raise InvalidRequest("tool and function messages are not served yet", param=where)
    if message.audio is not None:
        raise InvalidRequest("audio is not served", param=f"{where}.audio")
    content = message.content
    if isinstance(content, list):
        for j, part in enumerate(content):
            if part.type != "text":
                raise InvalidRequest(f"{part.type} content is not served; only text",
                                     param=f"{where}.content.{j}.type")  # fmt: skip
        content = "".join(part.text or "" for part in content)
    role = "system" if message.role == "developer" else message.role
    return {"role": role, "content": content or ""}


def forwarded_body(body: ChatCompletionRequest | CompletionRequest) -> dict[str, Any]:
    """What the predict server (or an upstream) gets: the client's fields, messages plain."""
    sent = body.model_dump(exclude_none=True, exclude={"messages", "user", "store", "metadata"})
    if isinstance(body, ChatCompletionRequest):
        sent["messages"] = [_plain(m, i) for i, m in enumerate(body.messages)]
    return sent


async def complete(
    sessions: sessionmaker[Session],
    settings: Settings,
    *,
    path: str,
    body: ChatCompletionRequest | CompletionRequest,
    tenant: str,
) -> Response:
    """``path`` is relative to a server's ``/v1`` (``/chat/completions``)."""
    route = settings.serve_upstreams.match(body.model)
    if route is not None:
        return await _complete_upstream(sessions, settings, route, path=path, body=body,
                                        tenant=tenant)  # fmt: skip
    _check_served(body, settings)
    sent = forwarded_body(body)

    def locate() -> Upstream:
        with sessions() as session:
            resolve_model(session, settings, model=body.model, tenant=tenant)
            server = pick_server(session, settings)
        if server is None:
            raise NoWorkers("no worker's predict server is up to answer (GRADACC_PREDICT_SERVER)")
        headers = {"Authorization": f"Bearer {server.token}", TENANT_HEADER: tenant}
        return Upstream(f"{server.url}/v1", headers)

    upstream = await run_in_threadpool(locate)
    return await forward(upstream, path, sent, stream=bool(body.stream),
                         timeout_s=settings.serve_timeout_s)  # fmt: skip


async def _complete_upstream(
    sessions: sessionmaker[Session],
    settings: Settings,
    route: UpstreamRoute,
    *,
    path: str,
    body: ChatCompletionRequest | CompletionRequest,
    tenant: str,
) -> Response:
    """Forwarded whole: what the upstream serves (tools, images, response_format) and its limits
    are its own, and its errors pass through. A name of this server's own (a built-in, an ``ft:``
    model) is checked for the tenant first, so a ``*`` route never opens another tenant's model."""
    if body.model.startswith(OWN_PREFIXES):

        def check() -> None:
            with sessions() as session:
                resolve_model(session, settings, model=body.model, tenant=tenant)

        await run_in_threadpool(check)
    sent = body.model_dump(exclude_none=True) | {"model": route.upstream_model(body.model)}
    label = f"the upstream server for {body.model!r} (GRADACC_SERVE_UPSTREAMS {route.pattern!r})"
    upstream = Upstream(route.server.base_url, route.headers(), label)
    return await forward(upstream, path, sent, stream=bool(body.stream),
                         timeout_s=settings.serve_timeout_s)  # fmt: skip
