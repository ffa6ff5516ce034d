"""The predict server's OpenAI endpoint: ``POST /v1/chat/completions`` and ``/v1/completions``
over plain HTTP on an internal address, for the API to forward to (``api.services.chat``).

Only the API talks to it: a request carries the server's token and the tenant the API
authenticated (``X-Gradacc-Tenant``); without the token it is a 401. The model's name is
resolved again here for that tenant. A stream is written as each token arrives; a client that
goes away (a failed write, or its socket closed) stops its generation at the next token.
Threads (one per connection) hand their rows to the engine's batcher, which decodes the rows of
concurrent requests for one model together (``worker.predict.batcher``).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gradacc.db import session_scope
from gradacc.errors import DomainError, ModelNotFound
from gradacc.serving.resolve import TENANT_HEADER, ServedModel, resolve_model
from gradacc.settings import Settings
from worker.predict.engine import Engine
from worker.predict.openai.protocol import CHAT, TEXT, Kind, ServeError
from worker.predict.openai.run import run_request
from worker.predict.reply import Reply

log = logging.getLogger(__name__)
ROUTES = {"/v1/chat/completions": CHAT, "/v1/completions": TEXT}
MAX_BODY_BYTES = 16 * 2**20


class OpenAIApp:
    def __init__(self, settings: Settings, engine: Engine, token: str) -> None:
        self.settings, self.engine, self.token = settings, engine, token

    def authorize(self, headers: Any) -> str:
        given = str(headers.get("Authorization", "")).removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise ServeError(401, "unauthorized", "this predict server wants its token")
        tenant = headers.get(TENANT_HEADER)
        if not tenant:
            raise ServeError(400, "invalid_request", f"{TENANT_HEADER} is missing")
        return str(tenant)

    def resolve(self, body: dict[str, Any], tenant: str) -> ServedModel:
        model = body.get("model")
        if not isinstance(model, str):
            raise ServeError(400, "invalid_request", "model: a model name is required", "model")
        try:
            with session_scope(self.settings) as session:
                return resolve_model(session, self.settings, model=model, tenant=tenant)
        except ModelNotFound as exc:
            raise ServeError(404, exc.code, exc.message, "model") from None
        except DomainError as exc:
            raise ServeError(400, exc.code, exc.message, exc.param) from None

    def handle(self, kind: Kind, tenant: str, body: dict[str, Any], reply: Reply) -> None:
        deadline = time.monotonic() + self.settings.serve_timeout_s
        served = self.resolve(body, tenant)
        run_request(self.engine, kind, served, body, reply, deadline=deadline)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        reply = Reply(self)
        try:
            kind = ROUTES.get(self.path)
            if kind is None:
                raise ServeError(404, "not_found", f"no route {self.path}")
            tenant = self.server.app.authorize(self.headers)
            self.server.app.handle(kind, tenant, self._body(), reply)
        except ServeError as exc:
            if not reply.started:
                reply.json(exc.status, exc.body())
        except Exception:
            log.exception("a completion failed")
            if not reply.started:
                reply.json(500, ServeError(500, "internal_error", "the generation failed").body())

    def do_GET(self) -> None:
        """``/stats``: the model cache's counts (bases and adapters loaded, and how many times
        each kind was read), for tests, the bench and an operator; the token, as for any call."""
        reply = Reply(self)
        try:
            if self.path != "/stats":
                raise ServeError(404, "not_found", f"no route {self.path}")
            self.server.app.authorize(self.headers)
            reply.json(200, self.server.app.engine.cache.stats())
        except ServeError as exc:
            reply.json(exc.status, exc.body())

    def _body(self) -> dict[str, Any]:
        size = int(self.headers.get("Content-Length") or 0)
        if size > MAX_BODY_BYTES:
            raise ServeError(413, "body_too_large", f"a body over {MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(self.rfile.read(size))
        except ValueError:
            raise ServeError(400, "invalid_json", "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ServeError(400, "invalid_request", "the body must be a JSON object")
        return body

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)  # not one stderr line per request


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    app: OpenAIApp


def start_openai_server(settings: Settings, engine: Engine, token: str) -> tuple[_Server, str]:
    """Listening on serve_host:serve_port (0: any free port), answered by daemon threads: the
    server and the base URL others reach it at."""
    server = _Server((settings.serve_host, settings.serve_port), _Handler)
    server.app = OpenAIApp(settings, engine, token)
    threading.Thread(target=server.serve_forever, name="openai-http", daemon=True).start()
    host = settings.serve_host
    if host in ("0.0.0.0", "::", ""):  # every interface: the address others know this host by
        host = settings.resolved_advertise_host()
    return server, f"http://{host}:{server.server_address[1]}"
