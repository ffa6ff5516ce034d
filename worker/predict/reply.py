"""How the predict server's OpenAI endpoint answers one request: one JSON body, or a stream of
Server-Sent Events in HTTP chunks, each written as it is made. A write that fails, or a socket
the client closed, marks the client gone; the generation asks ``gone()`` at every token."""

from __future__ import annotations

import json
import select
import socket
from http.server import BaseHTTPRequestHandler
from typing import Any


class Reply:
    """What a request's code may write: one JSON answer, or a stream of events."""

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self.handler, self.started, self.closed = handler, False, False

    def json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.handler.send_response(status)
        self.handler.send_header("Content-Type", "application/json")
        self.handler.send_header("Content-Length", str(len(data)))
        self.handler.end_headers()
        self.handler.wfile.write(data)
        self.started = True

    def start_stream(self) -> None:
        self.handler.send_response(200)
        self.handler.send_header("Content-Type", "text/event-stream")
        self.handler.send_header("Cache-Control", "no-cache")
        self.handler.send_header("Transfer-Encoding", "chunked")
        self.handler.end_headers()
        self.started = True

    def event(self, body: dict[str, Any] | str) -> None:
        data = body if isinstance(body, str) else json.dumps(body)
        self._chunk(f"data: {data}\n\n".encode())

    def finish_stream(self) -> None:
        self.event("[DONE]")
        self._chunk(b"")  # the last chunk of a chunked body

    def _chunk(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            self.handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except OSError:  # the client went away: the generation stops at its next token
            self.closed = True

    def gone(self) -> bool:
        """The client closed its connection (it sends nothing more while it reads a stream)."""
        if self.closed:
            return True
        sock = self.handler.connection
        try:
            if select.select([sock], [], [], 0)[0] and not sock.recv(1, socket.MSG_PEEK):
                self.closed = True
        except OSError:
            self.closed = True
        return self.closed


class Collected(Reply):
    """An answer kept, not sent: ``/predict``'s generations run the same path as a chat
    completion and read its one JSON body (no stream; no client to go away mid-way)."""

    def __init__(self) -> None:  # no handler: nothing is written
        self.started, self.closed = False, False
        self.code: int | None = None  # the HTTP status it would have been sent with
        self.body: dict[str, Any] = {}

    def json(self, status: int, body: dict[str, Any]) -> None:
        self.code, self.body, self.started = status, body, True

    def gone(self) -> bool:
        return False
