"""Refuse request bodies over ``max_body_bytes`` before anything parses them (413).

A declared Content-Length over the limit is answered without parsing, a body without one
(chunked) is counted as it arrives and cut off at the limit. Either way the rest of the body is
read and thrown away (up to ``DRAIN_LIMIT_BYTES``) before the answer: a server that closes a
socket with unread data in it makes the kernel send a reset, and a client that sent the whole
body before reading (Python's urllib, no ``Expect: 100-continue``) sees "connection reset by
peer" instead of the 413. ``limits`` gives POST routes that stream their body to disk (uploads)
a limit of their own.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response

# Read at most this much of a refused body; past it the connection is closed anyway (a client
# streaming gigabytes is not owed the bandwidth).
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024


async def drain(receive: Receive, *, limit: int = DRAIN_LIMIT_BYTES) -> None:
    """Read and discard the rest of the request body, up to ``limit`` bytes."""
    read = 0
    while read <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return  # the client went away
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


class BodySizeLimit:
    def __init__(
        self, app: ASGIApp, *, max_bytes: int, limits: dict[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.limits = limits or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self.max_bytes
        if scope["method"] == "POST":
            max_bytes = self.limits.get(scope["path"].rstrip("/"), max_bytes)
        message = f"request body over {max_bytes} bytes"
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
            await drain(receive)
            await error_response(413, "body_too_large", message)(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            chunk = await receive()
            if chunk["type"] == "http.request":
                received += len(chunk.get("body", b""))
                if received > max_bytes:
                    if chunk.get("more_body", False):
                        await drain(receive)
                    # Raised inside body parsing; FastAPI re-raises HTTPExceptions unchanged and
                    # the error handler gives it the standard body.
                    raise HTTPException(413, message)
            return chunk

        await self.app(scope, limited_receive, send)
