"""Asking a model from outside the API, as the API's chat route would ask it: the eval and
distillation runners, the batch runner and a training job's model graders (``served_chat``).

``ask`` follows the tenant's alias, then sends the request to the upstream server a route names
(``GRADACC_SERVE_UPSTREAMS``) or, for this server's own models (a built-in, an ``ft:`` model, a
checkpoint, a cached hub model), to a worker's predict server, an idle worker's first, with the
tenant named so the predict server checks the model is theirs. The answer is (status, JSON body);
a status in ``TRANSIENT`` means no server could answer now: ask again later."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
from sqlalchemy.orm import Session, sessionmaker

from gradacc.errors import DomainError, InvalidRequest, ModelNotFound
from gradacc.serving.aliases import resolve_alias
from gradacc.serving.resolve import TENANT_HEADER, pick_server, resolve_model
from gradacc.settings import Settings
from trainer_core.graders import ChatFn, ChatReply

log = logging.getLogger(__name__)
TRANSIENT = (429, 502, 503)  # no server could answer now: asked again, not kept (a 504 is kept)


def target(session: Session, settings: Settings, *, model: str, tenant: str) -> str:
    """The model that answers for ``model`` (an alias followed), checked as the tenant's: a
    ``DomainError`` (404 ``model_not_found``, 400) when nothing of theirs answers to it."""
    answering = resolve_alias(session, settings.serve_aliases, model=model, tenant=tenant)
    route = settings.serve_upstreams.match(answering)
    own = [answering] if route is None else route.own_names(answering)
    for name in own:
        resolve_model(session, settings, model=name, tenant=tenant)
    return answering


def checked_target(
    session: Session, settings: Settings, *, model: str, tenant: str, param: str
) -> str:
    """``target``, its refusal naming ``param``: a 404 ``model_not_found`` for a name nothing
    of the tenant's answers to, a 400 for any other reason."""
    try:
        return target(session, settings, model=model, tenant=tenant)
    except ModelNotFound as missing:
        missing.param = param
        raise
    except DomainError as problem:
        raise InvalidRequest(problem.message, param=param) from None


def ask(
    sessions: sessionmaker[Session],
    settings: Settings,
    *,
    tenant: str,
    path: str,
    body: dict[str, Any],
    timeout_s: float | None = None,
    checked: bool = False,
) -> tuple[int, Any]:
    """POST ``body`` to the server that answers its model, at ``path`` on its ``/v1``
    (``/chat/completions``). A model that is not the tenant's is answered as the API answers it
    (404 ``model_not_found``) without asking anyone; ``checked``: the caller followed the alias
    and checked the model already (a batch line's ``prepare``)."""
    timeout = (timeout_s or settings.serve_timeout_s) + 5
    with sessions() as session:
        model = str(body.get("model"))
        try:
            if not checked:
                model = target(session, settings, model=model, tenant=tenant)
        except DomainError as problem:
            status = 404 if problem.code == "model_not_found" else 400
            return status, {"error": {"code": problem.code, "message": problem.message}}
        route = settings.serve_upstreams.match(model)
        server = None if route is not None else pick_server(session, settings)
    if route is not None:
        url = route.server.base_url.rstrip("/") + path
        sent, headers = {**body, "model": route.upstream_model(model)}, route.headers()
    elif server is not None:
        url = f"{server.url}/v1{path}"
        sent = {**body, "model": model}
        headers = {"Authorization": f"Bearer {server.token}", TENANT_HEADER: tenant}
    else:
        return 503, {"error": {"code": "no_workers", "message": "no predict server is up"}}
    try:
        answer = httpx.post(url, json=sent, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        log.warning("asking %s: %s", url, type(exc).__name__)
        return 503, {"error": {"code": "unreachable", "message": f"{type(exc).__name__}"}}
    try:
        return answer.status_code, answer.json()
    except ValueError:
        return 502, {"error": {"code": "bad_answer", "message": answer.text[:300]}}


def error_message(status: int, body: Any) -> str:
    """The error an answer carries, for a record or a log."""
    found = body.get("error") if isinstance(body, dict) else None
    message = found.get("message") if isinstance(found, dict) else None
    return f"{status}: {message or str(body)[:300]}"


def reply_of(body: dict[str, Any]) -> ChatReply:
    """A chat completion's first choice as a grader reads it."""
    message = body["choices"][0]["message"]
    usage = {k: v for k, v in (body.get("usage") or {}).items() if isinstance(v, int)}
    return ChatReply(message.get("content") or "", usage, message.get("refusal"))


def served_chat(
    sessions: sessionmaker[Session],
    settings: Settings,
    tenant: str,
    *,
    waiting: Callable[[], bool] | None = None,
    retry_s: float = 2.0,
) -> ChatFn:
    """A grader's ``chat`` for ``tenant``: any model the API would answer for them (their own,
    a built-in, an upstream route). While no server can answer it waits and asks again, as long
    as ``waiting()`` says so (default: never waits); other failures raise (the grader's
    ``model_grader_server_error``)."""

    def chat(model: str, messages: list[dict[str, str]], sampling: dict[str, Any]) -> ChatReply:
        sent = {k: v for k, v in sampling.items() if v is not None}
        body = {**sent, "model": model, "messages": messages}
        while True:
            status, answer = ask(
                sessions, settings, tenant=tenant, path="/chat/completions", body=body
            )
            if status == 200:
                return reply_of(answer)
            if status not in TRANSIENT or waiting is None or not waiting():
                raise RuntimeError(error_message(status, answer))
            time.sleep(retry_s)

    return chat
