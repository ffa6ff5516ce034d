"""Function-calling rows as OpenAI's fine-tuning guide writes them, and the reference count of
what they train: transformers' own ``apply_chat_template(..., tools=...)`` and its assistant
mask, over messages in transformers' convention (arguments as objects), built here by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

CITIES = ("Paris", "Rome", "Oslo", "Lima", "Cairo", "Quito", "Delhi", "Perth")
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}  # fmt: skip
ADD = {"type": "function", "function": {"name": "add"}}


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip


def tool_row(i: int) -> dict[str, Any]:
    """Row ``i``: a question, one call (two in parallel on odd rows), the results, the answer.
    Every third row has a system prompt and content beside its calls."""
    city, other = CITIES[i % len(CITIES)], CITIES[(i + 3) % len(CITIES)]
    calls = [call(f"call_{i}_a", "get_weather", city=city)]
    if i % 2:
        calls.append(call(f"call_{i}_b", "get_weather", city=other))
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Weather in {city}?"}]
    if i % 3 == 0:
        messages.insert(0, {"role": "system", "content": "You answer briefly."})
    assistant: dict[str, Any] = {"role": "assistant", "tool_calls": calls}
    assistant["content"] = "Let me look." if i % 3 == 0 else None
    messages.append(assistant)
    messages += [{"role": "tool", "tool_call_id": c["id"], "content": f'{{"temp_c": {10 + k}}}'}
                 for k, c in enumerate(calls)]  # fmt: skip
    messages.append({"role": "assistant", "content": f"It is 10 C in {city}."})
    row: dict[str, Any] = {"messages": messages, "tools": [WEATHER, ADD]}
    if i % 4 == 0:
        row["parallel_tool_calls"] = True
    return row


def plain_row(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"{i} + 1?"},
                         {"role": "assistant", "content": f"{i + 1}."}]}  # fmt: skip


def tool_rows(n: int) -> list[dict[str, Any]]:
    """``n`` rows, every fifth one without function calling."""
    return [plain_row(i) if i % 5 == 4 else tool_row(i) for i in range(n)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def hf_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """transformers' convention: a call's arguments as an object; absent content left out."""
    converted = []
    for m in messages:
        m = {k: v for k, v in m.items() if v is not None}
        if "tool_calls" in m:
            m["tool_calls"] = [
                {**c, "function": {**c["function"],
                                   "arguments": json.loads(c["function"]["arguments"])}}
                for c in m["tool_calls"]
            ]  # fmt: skip
        converted.append(m)
    return converted


def reference(
    tokenizer: PreTrainedTokenizerBase, row: dict[str, Any]
) -> tuple[list[int], list[int]]:
    """(ids, assistant mask) of a row by transformers' ``apply_chat_template``."""
    out: Any = tokenizer.apply_chat_template(
        hf_messages(row["messages"]), tools=row.get("tools"), tokenize=True, return_dict=True,
        return_assistant_tokens_mask=True,
    )  # fmt: skip
    return list(out["input_ids"]), list(out["assistant_masks"])
