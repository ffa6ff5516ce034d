"""``score_model`` and ``label_model``: a chat model asked to grade, through a ``chat`` callable
the caller injects (the API passes this server's own chat completions path; a training run
passes its own), so nothing here speaks HTTP.

The reply is read as OpenAI's structured output reads it, ``{"result": …}``, or as a bare
number (score) or label: anything else is ``model_grader_parse_error``, a score outside the
grader's range too; a refusal is ``model_grader_refusal_error``; a call that fails is
``model_grader_server_error``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer_core.graders.errors import GraderFailed
from trainer_core.graders.templates import render
from trainer_core.spec.graders import InputText, LabelModelGrader, Message, ScoreModelGrader


@dataclass(frozen=True)
class ChatReply:
    text: str
    usage: dict[str, int] = field(default_factory=dict)  # prompt/completion/total_tokens
    refusal: str | None = None


# chat(model, messages, sampling) -> reply; raises on a failed call.
ChatFn = Callable[[str, list[dict[str, str]], dict[str, Any]], ChatReply]
# Told of every reply, before it is read: tokens spent on an unreadable answer still count.
SpentFn = Callable[[str, ChatReply], None]


def messages(inputs: list[Message], namespaces: dict[str, Any]) -> list[dict[str, str]]:
    """The grader's messages rendered; ``developer`` sent as ``system`` (chat templates know it)."""
    sent = []
    for message in inputs:
        parts = message.content if isinstance(message.content, list) else [message.content]
        texts = [render(p.text if isinstance(p, InputText) else p, namespaces) for p in parts]
        role = "system" if message.role == "developer" else message.role
        sent.append({"role": role, "content": "\n".join(texts)})
    return sent


def _ask(
    chat: ChatFn, spent: SpentFn, model: str, sent: list[dict[str, str]], sampling: dict[str, Any]
) -> ChatReply:
    try:
        reply = chat(model, sent, sampling)
    except Exception as exc:
        raise GraderFailed("model_grader_server_error", f"{type(exc).__name__}: {exc}") from exc
    spent(model, reply)
    if reply.refusal:
        raise GraderFailed("model_grader_refusal_error", reply.refusal)
    return reply


def _result(text: str) -> Any:
    """``{"result": x}`` when the reply is that JSON object, else the reply itself, stripped."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return text.strip()
    return parsed.get("result") if isinstance(parsed, dict) else parsed


def score_model(
    grader: ScoreModelGrader, namespaces: dict[str, Any], chat: ChatFn, spent: SpentFn
) -> float:
    params = grader.sampling_params
    sampling = (
        {}
        if params is None
        else {
            "max_completion_tokens": params.max_completions_tokens,
            "seed": params.seed,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
    )
    reply = _ask(chat, spent, grader.model, messages(grader.input, namespaces), sampling)
    value = _result(reply.text)
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise GraderFailed(
            "model_grader_parse_error", f"no score in {reply.text[:200]!r}"
        ) from None
    low, high = grader.bounds
    if not low <= score <= high:
        raise GraderFailed("model_grader_parse_error", f"{score} is outside [{low}, {high}]")
    return score


def label_model(
    grader: LabelModelGrader, namespaces: dict[str, Any], chat: ChatFn, spent: SpentFn
) -> float:
    """1 for a passing label, 0 for another of ``labels``."""
    reply = _ask(chat, spent, grader.model, messages(grader.input, namespaces), {})
    label = _result(reply.text)
    if label not in grader.labels:
        raise GraderFailed("model_grader_parse_error", f"{reply.text[:200]!r} is not a label")
    return 1.0 if label in grader.passing_labels else 0.0
