"""OpenAI's shapes on the predict server: a request's sampling parameters, and the answer and
stream chunks of ``chat.completion`` and ``text_completion``. The API checked the request's fields
(``gradacc.openai.chat_requests``); what needs the model (the prompt's length against its context) is checked
here, and anything odd that still arrives is a 400, not a crash."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from worker.predict.generation import Completion, Sampling, TokenLogprob
from worker.predict.tool_calls import call_deltas, parse


class ServeError(Exception):
    """An answer in OpenAI's error shape (``api.errors``' too)."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param

    def body(self) -> dict[str, Any]:
        kind = "server_error" if self.status >= 500 else "invalid_request_error"
        error = {"code": self.code, "message": self.message, "param": self.param, "type": kind}
        return {"error": error}


def invalid(param: str, message: str) -> ServeError:
    return ServeError(400, "invalid_request", f"{param}: {message}", param)


@dataclass(frozen=True)
class Kind:
    """What differs between /v1/chat/completions and /v1/completions."""

    chat: bool
    object: str
    chunk_object: str
    id_prefix: str
    prompt_param: str


CHAT = Kind(True, "chat.completion", "chat.completion.chunk", "chatcmpl-", "messages")
TEXT = Kind(False, "text_completion", "text_completion", "cmpl-", "prompt")


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise invalid(name, f"must be a number from {low:g} to {high:g}")
    return float(value)


def max_tokens_param(body: dict[str, Any]) -> str:
    return (
        "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    )


def sampling_of(
    body: dict[str, Any], kind: Kind, *, prompt_tokens: int, context: int, limit: int
) -> Sampling:
    """The request's sampling. An explicit max above ``limit`` or past the model's context is a
    400 naming it; none given: what the context leaves, up to ``limit``."""
    if prompt_tokens >= context:
        raise invalid(
            kind.prompt_param,
            f"the prompt is {prompt_tokens} tokens; this model's context is {context}",
        )
    param = max_tokens_param(body)
    asked = body.get(param)
    room = context - prompt_tokens
    if asked is None:
        max_tokens = min(room, limit)
    elif isinstance(asked, bool) or not isinstance(asked, int) or not 1 <= asked <= limit:
        raise invalid(param, f"must be from 1 to {limit} (GRADACC_SERVE_MAX_COMPLETION_TOKENS)")
    elif asked > room:
        raise invalid(
            param,
            f"the prompt ({prompt_tokens} tokens) and {asked} more exceed this "
            f"model's context of {context} tokens",
        )
    else:
        max_tokens = asked
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if not all(isinstance(s, str) for s in stops) or len(stops) > 4:
        raise invalid("stop", "must be a string or up to 4 strings")
    return Sampling(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0, 2),
        top_p=_number(body, "top_p", 1.0, 0, 1),
        stop=stops,
        top_logprobs=_top_logprobs(body, kind),
    )


def _top_logprobs(body: dict[str, Any], kind: Kind) -> int | None:
    if kind.chat:
        if not body.get("logprobs"):
            return None
        return int(_number(body, "top_logprobs", 0, 0, 20))
    value = body.get("logprobs")  # /v1/completions: an integer, the alternatives wanted
    return None if value is None else int(_number(body, "logprobs", 0, 0, 5))


def new_id(kind: Kind) -> str:
    return kind.id_prefix + secrets.token_hex(12)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _chat_logprobs(found: list[TokenLogprob]) -> dict[str, Any]:
    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    content = [
        entry(t.token, t.logprob) | {"top_logprobs": [entry(a, b) for a, b in t.top]} for t in found
    ]
    return {"content": content, "refusal": None}


def _text_logprobs(found: list[TokenLogprob], offset: int) -> dict[str, Any]:
    offsets, at = [], offset
    for t in found:
        offsets.append(at)
        at += len(t.token)
    return {
        "tokens": [t.token for t in found],
        "token_logprobs": [t.logprob for t in found],
        "top_logprobs": [dict(t.top) for t in found],
        "text_offset": offsets,
    }


def logprobs_of(kind: Kind, found: list[TokenLogprob], *, wanted: bool, offset: int = 0) -> Any:
    if not wanted:
        return None
    return _chat_logprobs(found) if kind.chat else _text_logprobs(found, offset)


def answer(
    kind: Kind,
    model: str,
    done: list[Completion],
    prompt_tokens: int,
    wanted_logprobs: bool,
    *,
    calls: bool = False,
    one_call: bool = False,
) -> dict[str, Any]:
    """``calls``: the text's ``<tool_call>`` blocks become ``message.tool_calls``
    (``worker.predict.tool_calls``; ``one_call``: the first only)."""
    choices = []
    for index, c in enumerate(done):
        choice: dict[str, Any] = {
            "index": index,
            "finish_reason": c.finish_reason,
            "logprobs": logprobs_of(kind, c.logprobs, wanted=wanted_logprobs),
        }
        if kind.chat:
            choice["message"] = {"role": "assistant", "content": c.text, "refusal": None}
            parsed = parse(c.text, one_call=one_call) if calls else None
            if parsed and parsed.tool_calls:
                choice["message"] |= {"content": parsed.content, "tool_calls": parsed.tool_calls}
                choice["finish_reason"] = "tool_calls"
        else:
            choice["text"] = c.text
        choices.append(choice)
    spent = sum(len(c.tokens) for c in done)
    return {
        "id": new_id(kind),
        "object": kind.object,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(prompt_tokens, spent),
        "system_fingerprint": None,
    }


def chunk(
    kind: Kind, ident: str, model: str, choices: list[dict[str, Any]], with_usage: bool
) -> dict[str, Any]:
    body = {
        "id": ident,
        "object": kind.chunk_object,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "system_fingerprint": None,
    }
    if with_usage:
        body["usage"] = None  # OpenAI: null on every chunk but the last one
    return body


def chunk_choice(
    kind: Kind,
    index: int,
    text: str | None,
    *,
    finish_reason: str | None = None,
    logprobs: Any = None,
    role: bool = False,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    if kind.chat:
        delta: dict[str, Any] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        if tool_calls:
            delta["tool_calls"] = call_deltas(tool_calls)
        return {
            "index": index,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
        }
    return {
        "index": index,
        "text": text or "",
        "logprobs": logprobs,
        "finish_reason": finish_reason,
    }
