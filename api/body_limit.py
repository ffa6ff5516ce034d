"""Refuse request bodies over ``max_body_bytes`` before anything parses them (413).

A declared Content-Length over the limit is answered at once, without reading the body; a body
without one (chunked) is counted as it arrives and cut off at the limit. ``limits`` gives POST
routes that stream their body to disk (uploads) a limit of their own.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response


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
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
            message = f"request body over {max_bytes} bytes"
            await error_response(413, "body_too_large", message)(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    # Raised inside body parsing; FastAPI re-raises HTTPExceptions unchanged and
                    # the error handler gives it the standard body.
                    raise HTTPException(413, f"request body over {max_bytes} bytes")
            return message

        await self.app(scope, limited_receive, send)
