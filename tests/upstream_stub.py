"""A stand-in OpenAI-compatible server on this machine (no real one runs here): it answers every
chat completion with ``content``, logs what it was sent (path, auth header, body), and holds the
requests for the model names in ``held`` until ``release()``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StubUpstream:
    def __init__(self, content: str = "4", held: frozenset[str] = frozenset()) -> None:
        self.content, self.held = content, held
        self.seen: list[dict[str, Any]] = []
        self.released = threading.Event()
        self.url = ""  # its base URL, as the openai SDK takes it (…/v1), once started

    def release(self) -> None:
        self.released.set()

    def answer(self, path: str, auth: str | None, body: dict[str, Any]) -> bytes:
        self.seen.append({"path": path, "auth": auth, **body})
        if body.get("model") in self.held:
            self.released.wait(timeout=60)
        message = {"role": "assistant", "content": self.content}
        usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        return json.dumps({"id": "c", "object": "chat.completion", "created": 0,
                           "model": body.get("model"), "usage": usage,
                           "choices": [{"index": 0, "message": message,
                                        "finish_reason": "stop"}]}).encode()  # fmt: skip


@contextmanager
def stub_upstream(stub: StubUpstream) -> Iterator[StubUpstream]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = stub.answer(self.path, self.headers.get("Authorization"), body)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stub.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield stub
    finally:
        stub.release()
        server.shutdown()
