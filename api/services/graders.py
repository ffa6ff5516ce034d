"""Try a grader before training with it (OpenAI's alpha graders API): ``validate`` checks it as a
reinforcement job's POST would, ``run`` scores one sample as a job's reward would. Both check each
model grader's model against the caller's tenant first (``gradacc.serving.grader_models``: a
model no one answers for them is a 400 naming the field, as a job's POST is). A model grader here
asks this server's own chat completions path (``api.services.chat.complete``, held against the
tenant's chat shares): the same messages and sampling, to the same servers, as a training job's
graders send (``gradacc.serving.ask.served_chat``): an upstream route's, or a worker's predict
server.

A run grades in a thread of its own, never one of the API's pool (whose tokens every sync route
needs), within the tenant's share and the process's (``GRADACC_MAX_GRADER_RUNS[_PER_TENANT]``),
under one deadline for the whole request (``GRADACC_GRADER_RUN_DEADLINE_S``), and stops when
the client goes away: its sandbox is killed and no further sub-grader starts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from api.schemas.graders import (
    GraderRunErrors,
    GraderRunMetadata,
    GraderRunRequest,
    GraderRunResponse,
    GraderValidateRequest,
    GraderValidateResponse,
)
from api.services import chat as chat_services
from api.services.shares import GRADER_RUNS, Cap
from gradacc.errors import InvalidRequest
from gradacc.grading import sandbox_limits
from gradacc.openai.chat_requests import ChatCompletionRequest
from gradacc.serving.ask import error_message, reply_of
from gradacc.serving.grader_models import check_grader_models
from gradacc.settings import Settings
from trainer_core.graders import ChatFn, ChatReply, GraderResult, Grading, run_grader
from trainer_core.spec.graders import Grader, error_param, parse_grader


def parse(grader: dict[str, Any]) -> Grader:
    """The grader, or a 400 naming each field at fault by its path."""
    try:
        return parse_grader(grader)
    except ValidationError as exc:
        found = [
            (error_param(e["loc"]), str(e["msg"]).removeprefix("Value error, "))
            for e in exc.errors()
        ]
    except ValueError as exc:
        found = [("grader.type", str(exc))]
    param, message = found[0]
    raise InvalidRequest(message, param=param, errors=[f"{p}: {m}" for p, m in found])


def validate(
    session: Session, settings: Settings, *, body: GraderValidateRequest, tenant: str
) -> GraderValidateResponse:
    grader = parse(body.grader)
    check_grader_models(session, settings, grader, tenant=tenant, where="grader")
    return GraderValidateResponse(grader=grader.model_dump(mode="json", exclude_none=True))


WATCH_S = 0.25  # how often a running grading asks whether its client is still there


async def run(
    sessions: sessionmaker[Session],
    settings: Settings,
    *,
    body: GraderRunRequest,
    tenant: str,
    gone: Callable[[], Awaitable[bool]],
) -> GraderRunResponse:
    """``gone``: whether the client went away (``Request.is_disconnected``)."""
    grader = parse(body.grader)
    await anyio.to_thread.run_sync(
        partial(_check_models, sessions, settings, grader, tenant),
        limiter=anyio.CapacityLimiter(1),  # a thread of its own, as the grading's
    )
    mine = Cap(settings.max_grader_runs_per_tenant, "GRADACC_MAX_GRADER_RUNS_PER_TENANT")
    every = Cap(settings.max_grader_runs, "GRADACC_MAX_GRADER_RUNS")
    with GRADER_RUNS.hold(tenant, mine, total=every):
        cancel = threading.Event()
        grading = Grading(
            chat=_chat(sessions, settings, tenant),
            limits=sandbox_limits(settings),
            deadline=time.monotonic() + settings.grader_run_deadline_s,
            cancel=cancel,
        )
        work = partial(run_grader, grader, body.model_sample, body.item, grading)
        result = await _while_connected(work, gone, cancel)
    return response(result)


async def _while_connected(
    work: Callable[[], GraderResult], gone: Callable[[], Awaitable[bool]], cancel: threading.Event
) -> GraderResult:
    """``work`` in a thread of its own limiter (no token of the API's pool); ``cancel`` set as
    soon as the client is gone."""

    async def watch() -> None:
        while not await gone():
            await anyio.sleep(WATCH_S)
        cancel.set()

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            result = await anyio.to_thread.run_sync(work, limiter=anyio.CapacityLimiter(1))
        finally:
            group.cancel_scope.cancel()
    return result


def response(result: GraderResult) -> GraderRunResponse:
    usage = result.usage_per_model
    total = sum(u.get("total_tokens", 0) for u in usage.values()) if usage else None
    scores = result.sub_rewards if result.type == "multi" else {result.name: result.reward}
    metadata = GraderRunMetadata(
        errors=GraderRunErrors(**result.errors, **result.details),
        execution_time=result.execution_time,
        name=result.name,
        sampled_model_name=None,
        scores=dict(scores),
        token_usage=total,
        type=result.type,
    )
    return GraderRunResponse(
        metadata=metadata,
        model_grader_token_usage_per_model=dict(usage),
        reward=result.reward,
        sub_rewards=dict(result.sub_rewards),
    )


def _chat(sessions: sessionmaker[Session], settings: Settings, tenant: str) -> ChatFn:
    """A chat callable for the grader's thread: it runs ``complete`` back on the event loop."""

    def chat(model: str, messages: list[dict[str, str]], sampling: dict[str, Any]) -> ChatReply:
        sent = {k: v for k, v in sampling.items() if v is not None}
        body = ChatCompletionRequest.model_validate({"model": model, "messages": messages, **sent})
        answer = anyio.from_thread.run(
            partial(
                chat_services.complete,
                sessions,
                settings,
                path="/chat/completions",
                body=body,
                tenant=tenant,
            )
        )
        data = json.loads(bytes(answer.body))
        if answer.status_code != 200:
            raise RuntimeError(error_message(answer.status_code, data))
        return reply_of(data)

    return chat


def _check_models(
    sessions: sessionmaker[Session], settings: Settings, grader: Grader, tenant: str
) -> None:
    with sessions() as session:
        check_grader_models(session, settings, grader, tenant=tenant, where="grader")
