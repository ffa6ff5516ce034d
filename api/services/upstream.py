"""Forwarding an OpenAI request to a server that speaks the protocol: a worker's predict server,
or an external inference server (vLLM, SGLang: ``GRADACC_SERVE_UPSTREAMS``) the same way, since an
upstream is just a base URL and the headers it wants. An answer passes through as it came (status
and body; an error body not in OpenAI's shape is put in it); a stream passes through piece by
piece, and when our client goes away the upstream connection is closed, which stops the
generation there."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import Response
from fastapi.responses import StreamingResponse

from api.errors import error_response
from gradacc.errors import NotReady

log = logging.getLogger(__name__)
CONNECT_S = 5.0


@dataclass(frozen=True)
class Upstream:
    base_url: str  # as the openai SDK takes it: http://127.0.0.1:8101/v1 (then /chat/completions)
    headers: dict[str, str] = field(default_factory=dict)
    label: str = "the model server"  # how an error names it to the client


async def forward(
    upstream: Upstream, path: str, body: dict[str, Any], *, stream: bool, timeout_s: float
) -> Response:
    """POST ``body`` to ``upstream``'s ``path``; its answer, or its stream, as ours."""
    timeout = httpx.Timeout(timeout_s + CONNECT_S, connect=CONNECT_S)
    client = httpx.AsyncClient(
        base_url=upstream.base_url, headers=upstream.headers, timeout=timeout
    )
    try:
        answer = await client.send(client.build_request("POST", path, json=body), stream=stream)
    except httpx.HTTPError as exc:
        await client.aclose()
        log.warning("upstream %s: %s", upstream.base_url, type(exc).__name__)
        raise NotReady(f"{upstream.label} cannot be reached; retry later") from None
    if answer.status_code in (401, 403):  # our token, not the client's key: not theirs to see
        await _close(answer, client)
        log.error("upstream %s refused the API's token", upstream.base_url)
        raise NotReady(f"{upstream.label} refused this API's key; retry later")
    if not stream or answer.status_code != 200:
        content = await answer.aread()
        await _close(answer, client)
        if answer.status_code >= 400:
            return as_openai_error(answer.status_code, content, label=upstream.label)
        kind = answer.headers.get("content-type", "application/json")
        return Response(content, status_code=answer.status_code, media_type=kind)
    return StreamingResponse(
        _relay(answer, client),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


def as_openai_error(status: int, content: bytes, *, label: str = "the model server") -> Response:
    """The upstream's error as it came when it is OpenAI's ``{"error": {...}}``; a flat one
    (older vLLM: ``{"object": "error", "message": ...}``) nested; anything else (a proxy's page)
    wrapped, its start kept as the message."""
    try:
        found = json.loads(content)
    except ValueError:
        found = None
    if isinstance(found, dict) and isinstance(found.get("error"), dict):
        return Response(content, status_code=status, media_type="application/json")
    if isinstance(found, dict) and isinstance(found.get("message"), str):
        strings = {k: v for k, v in found.items() if isinstance(v, str)}  # vLLM: code is a number
        code = strings.get("code", "upstream_error")
        return error_response(status, code, strings["message"], strings.get("param"))
    text = content.decode("utf-8", errors="replace").strip()[:500]
    return error_response(status, "upstream_error", f"{label} answered {status}: {text}")


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
