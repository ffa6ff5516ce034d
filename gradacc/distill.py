"""Distillation: a teacher model (any the tenant may chat with: a built-in, an ``ft:`` model, an
alias, an upstream route to the old hosted model) sampled on a prompt file, its answers written as
a chat training file (OpenAI's format: ``{"messages": [..., {"role": "assistant", ...}]}``) that a
supervised job trains on as it is.

A prompt row is ``{"messages": [...]}`` (a final assistant turn is dropped and answered again, so
a training file is a prompt file) or ``{"prompt": "..."}`` (one user message). Each row's answer
is kept as it comes (``gradacc.run_items``): a worker that dies loses none, and the teacher is
never asked twice for a finished row. The tokens each row cost are kept with it and summed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from gradacc.errors import InvalidRequest
from gradacc.evals.sources import ROLES, content_text, sampling_params
from gradacc.serving.ask import TRANSIENT, error_message

MAX_PROMPTS = 50_000
USAGE = ("prompt_tokens", "completion_tokens", "total_tokens")
AskFn = Callable[[dict[str, Any]], tuple[int, Any]]


def parse_prompts(text: str) -> list[list[dict[str, str]]]:
    """Each row's messages to ask; a ValueError names the first line at fault."""
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            prompts.append(_prompt(json.loads(line)))
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
    if not 0 < len(prompts) <= MAX_PROMPTS:
        raise ValueError(f"1 to {MAX_PROMPTS} prompts (this file: {len(prompts)})")
    return prompts


def _prompt(row: Any) -> list[dict[str, str]]:
    if isinstance(row, dict) and isinstance(row.get("prompt"), str):
        return [{"role": "user", "content": row["prompt"]}]
    messages = row.get("messages") if isinstance(row, dict) else None
    if not isinstance(messages, list) or not messages:
        raise ValueError("a row is {'messages': [...]} or {'prompt': '...'}")
    found = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise ValueError(f"a message's role is one of {', '.join(ROLES)}")
        if message.get("tool_calls") or message.get("role") == "tool":
            raise ValueError("tool calls are not distilled: text conversations only")
        found.append({"role": message["role"], "content": content_text(message.get("content"))})
    if found[-1]["role"] == "assistant":
        found = found[:-1]
    if not found or found[-1]["role"] == "assistant":
        raise ValueError("nothing to answer: the row ends with an assistant turn")
    return found


def check_sampling(raw: Any) -> dict[str, Any]:
    """The sampling settings sent with every prompt; a ValueError names the field."""
    try:
        return sampling_params(raw, "sampling")
    except InvalidRequest as problem:
        raise ValueError(f"{problem.param}: {problem.message}") from None


def answer_row(
    teacher: str, sampling: dict[str, Any], messages: list[dict[str, str]], ask: AskFn
) -> tuple[str, dict[str, Any]] | None:
    """("ok" | "error", record); None when no server could answer now (ask again later)."""
    status, answer = ask({"model": teacher, "messages": messages, **sampling})
    if status in TRANSIENT:
        return None
    if status != 200:
        return "error", {"error": error_message(status, answer)}
    choice = answer["choices"][0]
    reply = {"role": "assistant", "content": choice["message"].get("content") or ""}
    usage = {k: int((answer.get("usage") or {}).get(k) or 0) for k in USAGE}
    finish = choice.get("finish_reason") or ""
    return "ok", {"messages": [*messages, reply], "usage": usage, "finish_reason": finish}


def usage_of(records: Iterable[dict[str, Any]]) -> dict[str, int]:
    """The tokens the teacher spent so far."""
    total = dict.fromkeys(USAGE, 0)
    for record in records:
        for key in USAGE:
            total[key] += int((record.get("usage") or {}).get(key, 0))
    return total


def training_rows(records: Iterable[tuple[int, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The training file's rows, in prompt order: each answered prompt's conversation."""
    return [{"messages": r["messages"]} for _, status, r in records if status == "ok"]


def row_errors(records: Iterable[tuple[int, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The prompts the teacher refused, by their place (line of prompts, from 1)."""
    return [
        {"line": number + 1, "message": r["error"]}
        for number, status, r in records
        if status != "ok"
    ]
