"""A stored-completions export as a team writes one, built with the ``openai`` SDK's own types the
way the SDK builds them from the API's JSON (``construct``, no validation: a stored input message
keeps its role although the type says "assistant"), dumped with ``model_dump(mode="json")``, one
record a line; and, for each record, the training row an import must write (its truth).

Records go through five conversations (``i % 5``): system + user; developer + a user message in
text parts; a second turn after an earlier assistant answer; an answer that calls a tool; an
answer after a tool's result. Even records are a ``ChatCompletion`` with ``input_messages`` (and
the request's ``tools`` added beside them), odd ones ``{request, response}``.
"""

from __future__ import annotations

import json
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionStoreMessage

MODEL = "gpt-4o-mini-2024-07-18"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip
CITIES = ("Paris", "Rome", "Oslo", "Lima")


def _call(i: int) -> dict[str, Any]:
    city = CITIES[i % len(CITIES)]
    arguments = json.dumps({"city": city})
    return {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}  # fmt: skip


def conversation(i: int) -> tuple[list[dict[str, Any]], dict[str, Any], list[Any] | None]:
    """(the request's messages as a client sent them, the answer, the request's tools)."""
    a, b = i % 7 + 2, i % 5 + 3
    question = {"role": "user", "content": f"What is {a} + {b}?"}
    answer: dict[str, Any] = {"role": "assistant", "content": f"{a} + {b} = {a + b}."}
    kind = i % 5
    if kind == 0:
        return [{"role": "system", "content": "You add."}, question], answer, None
    if kind == 1:
        parts = [{"type": "text", "text": f"What is {a} "}, {"type": "text", "text": f"+ {b}?"}]
        return [{"role": "developer", "content": "Add."}, {"role": "user", "content": parts}], answer, None  # fmt: skip
    if kind == 2:
        earlier = {"role": "assistant", "content": f"{a} + 1 = {a + 1}."}
        first = {"role": "user", "content": f"What is {a} + 1?"}
        return [first, earlier, question], answer, None
    if kind == 3:
        ask = {"role": "user", "content": f"Weather in {CITIES[i % len(CITIES)]}?"}
        return [ask], {"role": "assistant", "content": None, "tool_calls": [_call(i)]}, [WEATHER]
    ask = {"role": "user", "content": f"Weather in {CITIES[i % len(CITIES)]}?"}
    called = {"role": "assistant", "content": None, "tool_calls": [_call(i)]}
    result = {"role": "tool", "tool_call_id": f"call_{i}", "content": '{"temp_c": 12}'}
    said = {"role": "assistant", "content": f"It is 12 C in {CITIES[i % len(CITIES)]}."}
    return [ask, called, result], said, [WEATHER]


def completion(
    i: int, answer: dict[str, Any], *, finish_reason: str | None = None
) -> ChatCompletion:
    """The ``ChatCompletion`` that ``chat.completions.list()`` returns for record ``i``."""
    calls = answer.get("tool_calls")
    message = {"role": "assistant", "content": answer["content"], "refusal": None,
               "annotations": [], "tool_calls": calls}  # fmt: skip
    choice = {"index": 0, "logprobs": None, "message": message,
              "finish_reason": finish_reason or ("tool_calls" if calls else "stop")}  # fmt: skip
    usage = {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
    return ChatCompletion.construct(  # as the SDK builds it from the API's JSON
        id=f"chatcmpl-{i}", object="chat.completion", created=1_760_000_000 + i, model=MODEL,
        choices=[choice], usage=usage, metadata={"app": "support", "n": str(i)},
        service_tier="default", system_fingerprint="fp_1",
    )  # fmt: skip


def stored_messages(i: int, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``chat.completions.messages.list(id)`` gives: ``ChatCompletionStoreMessage`` objects,
    a list of parts as ``content_parts`` (content null)."""
    stored = []
    for k, m in enumerate(messages):
        fields = {"id": f"chatcmpl-{i}-{k}", **m}
        if isinstance(m.get("content"), list):
            fields |= {"content": None, "content_parts": m["content"]}
        stored.append(ChatCompletionStoreMessage.construct(**fields).model_dump(mode="json"))
    return stored


def record(i: int, *, finish_reason: str | None = None) -> dict[str, Any]:
    messages, answer, tools = conversation(i)
    done = completion(i, answer, finish_reason=finish_reason).model_dump(mode="json")
    if i % 2 == 0:
        added = {"input_messages": stored_messages(i, messages)}
        return done | added | ({"tools": tools} if tools else {})
    request: dict[str, Any] = {"model": MODEL, "messages": messages, "store": True}
    if tools:
        request["tools"] = tools
    return {"request": request, "response": done}


def expected_row(i: int) -> dict[str, Any]:
    """The row an import writes for record ``i``: messages plain, earlier answers at weight 0."""
    messages, answer, tools = conversation(i)
    plain = []
    for m in messages:
        content = m["content"]
        if isinstance(content, list):
            content = "".join(p["text"] for p in content)
        row = {"role": "system" if m["role"] == "developer" else m["role"], "content": content}
        row |= {k: m[k] for k in ("tool_calls", "tool_call_id") if k in m}
        plain.append(row | ({"weight": 0} if m["role"] == "assistant" else {}))
    return {"messages": [*plain, answer]} | ({"tools": tools} if tools else {})


def export(n: int, *, truncated: int | None = None) -> bytes:
    """``n`` records as JSON lines; line ``truncated`` (from 1) an answer cut at max_tokens."""
    lines = [record(i, finish_reason="length" if i + 1 == truncated else None) for i in range(n)]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()
