"""Function calling as OpenAI defines it for chat fine-tuning, the torch-free part: the checks of
a row's ``tools``, ``parallel_tool_calls``, assistant ``tool_calls`` and ``tool`` messages (the
API checks uploads with them, the core the rows it trains on), and what can be told of a chat
template without rendering it (the API never renders a template: that runs in the worker).

A row: ``{"messages": [...], "tools": [{"type": "function", "function": {"name",
"description"?, "parameters"?}}], "parallel_tool_calls": bool?}``. An assistant message may hold
``tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}]`` (``arguments``: the
JSON text of an object) and then no content; a ``tool`` message answers one by ``tool_call_id``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# OpenAI's rule for a function's name.
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ARGUMENTS_EXAMPLE = """'{"city": "Paris"}'"""


def tools_problems(tools: Any, where: str = "tools") -> list[str]:
    """What is wrong with a row's ``tools`` (None: the row has none), each naming its field."""
    if tools is None:
        return []
    if not isinstance(tools, list) or not tools:
        return [f"{where}: a non-empty list of {{type: 'function', function: {{name, ...}}}}"]
    problems: list[str] = []
    names: set[str] = set()
    for i, tool in enumerate(tools):
        field = f"{where}[{i}]"
        if not isinstance(tool, Mapping):
            problems.append(f"{field}: an object with type 'function' and function")
            continue
        if tool.get("type") != "function":
            problems.append(f"{field}.type: 'function' (got {tool.get('type')!r})")
        function = tool.get("function")
        if not isinstance(function, Mapping):
            problems.append(f"{field}.function: an object with name, description?, parameters?")
            continue
        name = function.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            problems.append(
                f"{field}.function.name: 1 to 64 letters, digits, '_' or '-' (got {name!r})"
            )
        elif name in names:
            problems.append(f"{field}.function.name: {name!r} is declared twice")
        else:
            names.add(name)
        if function.get("description") is not None and not isinstance(
            function.get("description"), str
        ):
            problems.append(f"{field}.function.description: a string")
        if function.get("parameters") is not None and not isinstance(
            function.get("parameters"), Mapping
        ):
            problems.append(f"{field}.function.parameters: a JSON Schema object")
    return problems


def parallel_problems(parallel: Any) -> list[str]:
    if parallel is None or isinstance(parallel, bool):
        return []
    return [f"parallel_tool_calls: true or false (got {parallel!r})"]


def arguments_object(arguments: Any) -> dict[str, Any] | None:
    """The object a call's ``arguments`` encode, or None when they are not an object's JSON."""
    if not isinstance(arguments, str):
        return None
    try:
        found = json.loads(arguments)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def tool_call_problems(calls: Any, field: str, ids: set[str], *, parallel: bool) -> list[str]:
    """An assistant message's ``tool_calls`` (``field``: its path); the ids it makes are added
    to ``ids``, the calls a later ``tool`` message may answer."""
    if not isinstance(calls, list) or not calls:
        return [
            f"{field}: a non-empty list of {{id, type: 'function', function: {{name, arguments}}}}"
        ]
    problems = []
    if not parallel and len(calls) > 1:
        problems.append(
            f"{field}: {len(calls)} calls in one message, but parallel_tool_calls is "
            "false (one call a message)"
        )
    for j, call in enumerate(calls):
        at = f"{field}[{j}]"
        if not isinstance(call, Mapping):
            problems.append(f"{at}: an object with id, type 'function' and function")
            continue
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            problems.append(f"{at}.id: a non-empty string")
        elif call_id in ids:
            problems.append(f"{at}.id: {call_id!r} is used by an earlier tool call")
        else:
            ids.add(call_id)
        if call.get("type") != "function":
            problems.append(f"{at}.type: 'function' (got {call.get('type')!r})")
        function = call.get("function")
        if not isinstance(function, Mapping):
            problems.append(f"{at}.function: an object with name and arguments")
            continue
        if not isinstance(function.get("name"), str) or not function["name"]:
            problems.append(f"{at}.function.name: a non-empty string")
        if arguments_object(function.get("arguments")) is None:
            problems.append(
                f"{at}.function.arguments: must be a JSON string of an object, like "
                f"{ARGUMENTS_EXAMPLE} (got {_short(function.get('arguments'))})"
            )
    return problems


def answer_problems(message: Mapping[str, Any], field: str, ids: set[str]) -> list[str]:
    """A ``tool`` message answers a call an earlier assistant message made."""
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        return [f"{field}.tool_call_id: the id of the assistant tool call this answers"]
    if call_id not in ids:
        return [f"{field}.tool_call_id: no earlier assistant tool call has id {call_id!r}"]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def template_refusal(template: str, *, tools: bool, tool_calls: bool) -> str | None:
    """Why ``template`` cannot render a file's function calling, as far as its text tells
    (None: it reads them; rendering, in the worker, checks the rest). A template that never
    reads ``tools`` or ``tool_calls`` would drop them without a word."""
    if tools and "tools" not in template:
        return (
            "the chat template never reads `tools`: the file's tools would not be rendered; "
            "give chat_template 'chatml' or a template that renders tools"
        )
    if tool_calls and "tool_calls" not in template:
        return (
            "the chat template never reads a message's `tool_calls`: the assistant's tool "
            "calls would not be trained; give chat_template 'chatml' or a template that "
            "renders them"
        )
    return None
