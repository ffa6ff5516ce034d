"""Try a grader before training with it (OpenAI's alpha graders API): ``validate`` parses it as a
reinforcement job would, ``run`` scores one sample. Model graders ask this server's own chat
completions path (``api.services.chat.complete``), for the caller's tenant."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import anyio.from_thread
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.schemas.chat import ChatCompletionRequest
from api.schemas.graders import (
    GraderRunErrors,
    GraderRunMetadata,
    GraderRunRequest,
    GraderRunResponse,
    GraderValidateRequest,
    GraderValidateResponse,
)
from api.services import chat as chat_services
from gradacc.errors import InvalidRequest
from gradacc.graders import ChatFn, ChatReply, GraderResult, Grading, run_grader
from gradacc.graders.limits import sandbox_limits
from gradacc.settings import Settings
from trainer_core.spec.graders import Grader, error_param, parse_grader


def parse(grader: dict[str, Any]) -> Grader:
    """The grader, or a 400 naming each field at fault by its path."""
    try:
        return parse_grader(grader)
    except ValidationError as exc:
        found = [(error_param(e["loc"]), str(e["msg"]).removeprefix("Value error, "))
                 for e in exc.errors()]  # fmt: skip
    except ValueError as exc:
        found = [("grader.type", str(exc))]
    param, message = found[0]
    raise InvalidRequest(message, param=param, errors=[f"{p}: {m}" for p, m in found])


def validate(*, body: GraderValidateRequest) -> GraderValidateResponse:
    grader = parse(body.grader)
    return GraderValidateResponse(grader=grader.model_dump(mode="json", exclude_none=True))


async def run(
    sessions: sessionmaker[Session], settings: Settings, *, body: GraderRunRequest, tenant: str
) -> GraderRunResponse:
    grader = parse(body.grader)
    grading = Grading(chat=_chat(sessions, settings, tenant), limits=sandbox_limits(settings))
    result = await run_in_threadpool(run_grader, grader, body.model_sample, body.item, grading)
    return response(result)


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
    return GraderRunResponse(metadata=metadata, model_grader_token_usage_per_model=dict(usage),
                             reward=result.reward, sub_rewards=dict(result.sub_rewards))  # fmt: skip


def _chat(sessions: sessionmaker[Session], settings: Settings, tenant: str) -> ChatFn:
    """A chat callable for the grader's thread: it runs ``complete`` back on the event loop."""

    def chat(model: str, messages: list[dict[str, str]], sampling: dict[str, Any]) -> ChatReply:
        sent = {k: v for k, v in sampling.items() if v is not None}
        body = ChatCompletionRequest.model_validate({"model": model, "messages": messages, **sent})
        answer = anyio.from_thread.run(partial(chat_services.complete, sessions, settings,
                                               path="/chat/completions", body=body,
                                               tenant=tenant))  # fmt: skip
        data = json.loads(bytes(answer.body))
        if answer.status_code != 200:
            raise RuntimeError(f"{answer.status_code}: {data.get('error', {}).get('message')}")
        message = data["choices"][0]["message"]
        usage = {k: v for k, v in (data.get("usage") or {}).items() if isinstance(v, int)}
        return ChatReply(message.get("content") or "", usage, message.get("refusal"))

    return chat
