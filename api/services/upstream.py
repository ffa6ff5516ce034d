"""Forwarding an OpenAI request to a server that speaks the protocol: a worker's predict server
today, an external inference server (vLLM, SGLang) the same way tomorrow, since an upstream is
just a base URL and the headers it wants. An answer passes through as it came (status and body,
OpenAI's error shape included); a stream passes through piece by piece, and when our client goes
away the upstream connection is closed, which stops the generation there."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import Response
from fastapi.responses import StreamingResponse

from gradacc.errors import NotReady

log = logging.getLogger(__name__)
CONNECT_S = 5.0


@dataclass(frozen=True)
class Upstream:
    base_url: str  # e.g. http://127.0.0.1:8101 (requests go to {base_url}/v1/...)
    headers: dict[str, str] = field(default_factory=dict)


async def forward(
    upstream: Upstream, path: str, body: dict[str, Any], *, stream: bool, timeout_s: float
) -> Response:
    """POST ``body`` to ``upstream``'s ``path``; its answer, or its stream, as ours."""
    timeout = httpx.Timeout(timeout_s + CONNECT_S, connect=CONNECT_S)
    client = httpx.AsyncClient(base_url=upstream.base_url, headers=upstream.headers,
                               timeout=timeout)  # fmt: skip
    try:
        answer = await client.send(client.build_request("POST", path, json=body), stream=stream)
    except httpx.HTTPError as exc:
        await client.aclose()
        log.warning("upstream %s: %s", upstream.base_url, type(exc).__name__)
        raise NotReady("the model server cannot be reached; retry later") from None
    if answer.status_code in (401, 403):  # our token, not the client's key: not theirs to see
        await _close(answer, client)
        log.error("upstream %s refused the API's token", upstream.base_url)
        raise NotReady("the model server refused this API; retry later")
    if not stream or answer.status_code != 200:
        content = await answer.aread()
        await _close(answer, client)
        kind = answer.headers.get("content-type", "application/json")
        return Response(content, status_code=answer.status_code, media_type=kind)
    return StreamingResponse(_relay(answer, client), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})  # fmt: skip


async def _relay(answer: httpx.Response, client: httpx.AsyncClient) -> AsyncIterator[bytes]:
    try:
        async for piece in answer.aiter_raw():
            yield piece
    except httpx.HTTPError as exc:  # the upstream broke off: the stream ends (no [DONE])
        log.warning("upstream stream broke off: %s", type(exc).__name__)
    finally:  # also when our client went away (the task is cancelled): the upstream stops
        await _close(answer, client)


async def _close(answer: httpx.Response, client: httpx.AsyncClient) -> None:
    await answer.aclose()
    await client.aclose()
