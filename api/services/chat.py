"""/v1/chat/completions and /v1/completions: refuse what is not served (a 400 naming it), check
the model is the tenant's (404 ``model_not_found`` otherwise), then forward the request to a
predict server and pass its answer, or its stream, straight through (``api.services.upstream``).
A model ``GRADACC_SERVE_UPSTREAMS`` sends elsewhere goes to that server instead, as the client
wrote it, with the tenant check still done here. The API loads no model: it only knows where
one is."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from fastapi import Response
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.schemas.chat import ChatCompletionRequest, ChatMessage, CompletionRequest
from api.services.shares import CHAT_TOKENS, CHATS, Cap
from api.services.upstream import Upstream, forward
from gradacc.errors import InvalidRequest, NoWorkers
from gradacc.serving.aliases import resolve_alias
from gradacc.serving.resolve import TENANT_HEADER, pick_server, resolve_model
from gradacc.settings import Settings
from gradacc.upstreams import UpstreamRoute
from trainer_core.spec.tools import answer_problems, tool_call_problems, tools_problems

# OpenAI's fields that would change the answer in ways this server cannot: named when given.
UNSERVED = {
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
    check_tools(given)
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
            raise InvalidRequest(
                f"at most {settings.serve_max_completion_tokens} "
                "(GRADACC_SERVE_MAX_COMPLETION_TOKENS)",
                param=field,
            )


def check_tools(given: dict[str, Any]) -> None:
    """``tools`` well made (the predict server decides whether the model's template renders
    them: a 400 naming ``tools`` if not); ``tool_choice`` only what is honoured: "auto" (the
    model decides) and "none" (tools shown, the answer left text). Forcing a call is not.
    ``parallel_tool_calls: false`` is: the answer ends with its first call."""
    tools = given.get("tools") or None
    if problems := tools_problems(tools):
        raise InvalidRequest(problems[0], param="tools")
    choice = given.get("tool_choice")
    if choice is not None and not tools:
        raise InvalidRequest("only with tools", param="tool_choice")
    if choice not in (None, "auto", "none"):
        shown = repr(choice) if isinstance(choice, str) else "a named function"
        raise InvalidRequest(
            f"{shown} is not served: a forced call needs decoding constrained to the "
            "template's call format, which this server does not do, so it could not promise "
            "the call; send 'auto' (the model decides: finish_reason 'tool_calls' when it "
            "calls) or 'none'",
            param="tool_choice",
        )


def _plain(message: ChatMessage, index: int, call_ids: set[str]) -> dict[str, Any]:
    """``{role, content}`` as a chat template reads it: text parts joined, ``developer`` as
    ``system`` (OpenAI treats them alike for models without the distinction). An assistant's
    ``tool_calls`` and a ``tool`` message's ``tool_call_id`` pass in the shape training renders
    (``trainer_core.spec.tools`` checks them; ``call_ids``: the calls made so far)."""
    where = f"messages.{index}"
    if message.role == "function" or message.function_call:
        raise InvalidRequest("function messages are not served; use tools", param=where)
    if message.audio is not None:
        raise InvalidRequest("audio is not served", param=f"{where}.audio")
    content = message.content
    if isinstance(content, list):
        for j, part in enumerate(content):
            if part.type != "text":
                raise InvalidRequest(
                    f"{part.type} content is not served; only text",
                    param=f"{where}.content.{j}.type",
                )
        content = "".join(part.text or "" for part in content)
    role = "system" if message.role == "developer" else message.role
    plain: dict[str, Any] = {"role": role, "content": content or ""}
    if message.tool_calls is not None:
        if role != "assistant":
            raise InvalidRequest("only an assistant message makes tool calls", param=where)
        field = f"{where}.tool_calls"
        if problems := tool_call_problems(message.tool_calls, field, call_ids, parallel=True):
            raise InvalidRequest(problems[0], param=field)
        plain |= {"content": content or None, "tool_calls": message.tool_calls}
    if role == "tool":
        if problems := answer_problems(message.model_dump(), where, call_ids):
            raise InvalidRequest(problems[0], param=f"{where}.tool_call_id")
        plain["tool_call_id"] = message.tool_call_id
    return plain


def forwarded_body(body: ChatCompletionRequest | CompletionRequest) -> dict[str, Any]:
    """What the predict server (or an upstream) gets: the client's fields, messages plain."""
    sent = body.model_dump(exclude_none=True, exclude={"messages", "user", "store", "metadata"})
    if isinstance(body, ChatCompletionRequest):
        call_ids: set[str] = set()
        sent["messages"] = [_plain(m, i, call_ids) for i, m in enumerate(body.messages)]
    return sent


async def complete(
    sessions: sessionmaker[Session],
    settings: Settings,
    *,
    path: str,
    body: ChatCompletionRequest | CompletionRequest,
    tenant: str,
    aliased: bool = False,
) -> Response:
    """``path`` is relative to a server's ``/v1`` (``/chat/completions``). Held against the
    tenant's share of requests and tokens in flight until the answer, or its stream, ends. A
    model alias (``gradacc.serving.aliases``) is followed first: the request is the named
    model's from then on (``aliased``: followed already)."""
    if not aliased:
        target = await run_in_threadpool(aliased_model, sessions, settings, body.model, tenant)
        body = body.model_copy(update={"model": target})
    route = settings.serve_upstreams.match(body.model)
    if route is None:  # a 400 naming the field comes before any share is taken
        _check_served(body, settings)
    give_back = _take_share(body, settings, tenant)
    try:
        if route is not None:
            answer = await _complete_upstream(
                sessions, settings, route, path=path, body=body, tenant=tenant
            )
        else:
            answer = await _complete_here(sessions, settings, path=path, body=body, tenant=tenant)
    except BaseException:
        give_back()
        raise
    if isinstance(answer, StreamingResponse):
        answer.body_iterator = _then(answer.body_iterator, give_back)
    else:
        give_back()
    return answer


def aliased_model(
    sessions: sessionmaker[Session], settings: Settings, model: str, tenant: str
) -> str:
    with sessions() as session:
        return resolve_alias(session, settings.serve_aliases, model=model, tenant=tenant)


def _take_share(
    body: ChatCompletionRequest | CompletionRequest, settings: Settings, tenant: str
) -> Callable[[], None]:
    asked = (
        getattr(body, "max_completion_tokens", None)
        or body.max_tokens
        or settings.serve_max_completion_tokens
    )
    tokens = (body.n or 1) * asked
    release_request = CHATS.take(
        tenant, Cap(settings.max_chats_per_tenant, "GRADACC_MAX_CHATS_PER_TENANT")
    )
    try:
        release_tokens = CHAT_TOKENS.take(
            tenant,
            Cap(settings.max_chat_tokens_per_tenant, "GRADACC_MAX_CHAT_TOKENS_PER_TENANT"),
            amount=tokens,
        )
    except BaseException:
        release_request()
        raise

    def give_back() -> None:
        release_tokens()
        release_request()

    return give_back


async def _then(pieces: AsyncIterable[Any], done: Callable[[], None]) -> AsyncIterator[Any]:
    try:
        async for piece in pieces:
            yield piece
    finally:  # the stream ended, or the client went away
        done()


async def _complete_here(
    sessions: sessionmaker[Session],
    settings: Settings,
    *,
    path: str,
    body: ChatCompletionRequest | CompletionRequest,
    tenant: str,
) -> Response:
    """On a worker's predict server (the request checked already)."""
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
    return await forward(
        upstream, path, sent, stream=bool(body.stream), timeout_s=settings.serve_timeout_s
    )


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
    model) is checked for the tenant first, and so is the name a rewrite sends, so a route never
    opens another tenant's model."""
    if own := route.own_names(body.model):

        def check() -> None:
            with sessions() as session:
                for name in own:
                    resolve_model(session, settings, model=name, tenant=tenant)

        await run_in_threadpool(check)
    sent = body.model_dump(exclude_none=True) | {"model": route.upstream_model(body.model)}
    label = f"the upstream server for {body.model!r} (GRADACC_SERVE_UPSTREAMS {route.pattern!r})"
    upstream = Upstream(route.server.base_url, route.headers(), label)
    return await forward(
        upstream, path, sent, stream=bool(body.stream), timeout_s=settings.serve_timeout_s
    )
