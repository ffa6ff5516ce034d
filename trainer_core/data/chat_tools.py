"""Function calling in the core's chat rows (``trainer_core.data.chat`` renders them): what
``datasets`` stores of a row's ``tools`` and an assistant's ``tool_calls`` turned back into
Python objects, the messages as a chat template reads them, and the check that a template
rendered them rather than dropping them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from trainer_core.spec.tools import arguments_object

# (messages, template kwargs) -> the text the job's template makes of them
Render = Callable[[list[dict[str, Any]], dict[str, Any]], str]


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as a chat template reads them: a tool call's ``arguments`` (OpenAI's JSON
    text) as the object they encode, as transformers' templates expect; others untouched."""
    return [_with_parsed_calls(m) if m.get("tool_calls") else m for m in messages]


def _with_parsed_calls(message: dict[str, Any]) -> dict[str, Any]:
    calls = []
    for call in message["tool_calls"]:
        function = dict(call["function"])
        function["arguments"] = arguments_object(function["arguments"])
        calls.append({**call, "function": function})
    return {**message, "tool_calls": calls}


def check_tools_rendered(
    messages: list[dict[str, Any]], text: str, render: Render, kwargs: dict[str, Any]
) -> None:
    """A template that ignores a row's tools or an assistant's tool calls would train without
    them: refused (``text``: the row rendered; ``render``: the same template on other
    messages). Tools: rendering without them must change the text. A call: its name and its
    arguments' keys must be in the text, and rendering without the calls must change it."""
    if kwargs.get("tools") and text == render(messages, _without_tools(kwargs)):
        raise ValueError(
            "chat_template: it does not render the row's `tools` (the text is the "
            "same without them); give 'chatml' or a template that renders tools"
        )
    for i, message in enumerate(messages):
        for j, call in enumerate(message.get("tool_calls") or []):
            function = call["function"]
            words = [function["name"], *function["arguments"]]
            if not all(word in text for word in words):
                raise ValueError(
                    f"chat_template: it does not render messages[{i}].tool_calls[{j}]"
                    f" (its name or arguments are not in the text); give 'chatml' "
                    "or a template that renders tool_calls"
                )
        if message.get("tool_calls"):
            bare = {k: v for k, v in message.items() if k != "tool_calls"}
            bare["content"] = message.get("content") or ""
            if text == render([*messages[:i], bare, *messages[i + 1 :]], kwargs):
                raise ValueError(
                    f"chat_template: it renders messages[{i}] the same without its "
                    "tool_calls; give 'chatml' or a template that renders them"
                )


def _without_tools(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k != "tools"}


def decoded_message(message: Any) -> Any:
    """A message's ``tool_calls`` from the ``Json`` storage ``datasets`` may give them, down to
    a call's ``function`` (its ``arguments`` are OpenAI's JSON text: kept as text)."""
    if not isinstance(message, dict) or message.get("tool_calls") is None:
        return message
    calls = _json_value(message["tool_calls"])
    if isinstance(calls, list):
        calls = [_json_field(_json_value(c), "function") for c in calls]
    return {**message, "tool_calls": calls}


def decoded_tools(tools: Any) -> Any:
    """A row's ``tools``, from the ``Json`` storage ``datasets`` may give any level of it."""
    tools = _json_value(tools)
    if not isinstance(tools, list):
        return tools
    decoded = [_json_field(_json_value(t), "function") for t in tools]
    return [
        {**t, "function": _json_field(t["function"], "parameters")}
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
        else t
        for t in decoded
    ]


def _json_value(value: Any) -> Any:
    """JSON text that encodes an object or a list, decoded; anything else as it is."""
    if not isinstance(value, str):
        return value
    try:
        found = json.loads(value)
    except ValueError:
        return value
    return found if isinstance(found, dict | list) else value


def _json_field(value: Any, key: str) -> Any:
    if isinstance(value, dict) and key in value:
        return {**value, key: _json_value(value[key])}
    return value


def row_column(batch: pa.Table, name: str) -> list[Any]:
    """A row-level column's values, or None for each row when the data has no such column."""
    if name in batch.column_names:
        values: list[Any] = batch.column(name).to_pylist()
        return values
    return [None] * batch.num_rows
