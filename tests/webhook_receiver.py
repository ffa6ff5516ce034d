"""A local webhook receiver for tests: records every POST, answers 500 to the first one of /ok and
to every one of /down, 204 otherwise."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.fail_first = 1  # answer 500 to the first request of /ok, then 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.server.received.append((self.path, dict(self.headers), body))
        failing = self.path == "/down" or (self.path == "/ok" and self.server.fail_first > 0)
        if self.path == "/ok" and self.server.fail_first > 0:
            self.server.fail_first -= 1
        self.send_response(500 if failing else 204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
