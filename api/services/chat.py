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

from api.services.shares import CHAT_TOKENS, CHATS, Cap
from api.services.upstream import Upstream, forward
from gradacc.errors import NoWorkers
from gradacc.openai.chat_checks import check_served, forwarded_body
from gradacc.openai.chat_requests import ChatCompletionRequest, CompletionRequest
from gradacc.serving.aliases import resolve_alias
from gradacc.serving.resolve import TENANT_HEADER, pick_server, resolve_model
from gradacc.settings import Settings
from gradacc.upstreams import UpstreamRoute


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
        check_served(body, settings)
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
