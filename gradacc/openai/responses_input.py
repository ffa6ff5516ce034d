"""OpenAI's Responses API, its request side: a ``/v1/responses`` body becomes the chat completion
body this server already answers (docs/openai.md). Pure: the API and the batch runner share it.

What maps: ``input`` (a string, or items: messages with text parts, ``function_call`` and
``function_call_output``), ``instructions`` (a system message first; OpenAI does not carry a
previous response's instructions over, nor do we), ``max_output_tokens``, ``temperature``,
``top_p``, function ``tools`` (Responses' flat form to chat's nested one), ``tool_choice`` and
``parallel_tool_calls``. What is not served is refused naming its field: reasoning items,
built-in tools (web search, file search, ...), images, files and audio, structured output
formats, background mode, conversations, stored prompts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gradacc.errors import InvalidRequest

# Request fields that would change the answer in ways this server cannot: refused when given.
UNSERVED = {
    "background": "background mode is not served; poll-free: the answer comes in the request",
    "conversation": "conversations are not served; use previous_response_id",
    "prompt": "stored prompts are not served; send the input itself",
    "max_tool_calls": "max_tool_calls is not served",
    "top_logprobs": "logprobs are not served on /v1/responses; use /v1/chat/completions",
    "context_management": "context management is not served",
}
TEXT_PARTS = {"input_text", "output_text", "text"}
ROLES = {"user", "assistant", "system", "developer"}


def unserved_problem(given: Mapping[str, Any]) -> InvalidRequest | None:
    """The first field of a request that is not served, as the 400 naming it."""
    for field, why in UNSERVED.items():
        if given.get(field) not in (None, False, [], {}):
            return InvalidRequest(why, param=field)
    reasoning = given.get("reasoning") or {}
    if any(value is not None for value in reasoning.values()):
        return InvalidRequest(
            "these models do not reason apart from their answer; leave reasoning out",
            param="reasoning",
        )
    text = given.get("text") or {}
    kind = (text.get("format") or {"type": "text"}).get("type")
    if kind != "text":
        return InvalidRequest(f"only text answers are served (got {kind!r})", param="text.format")
    if text.get("verbosity") not in (None, "medium"):
        return InvalidRequest("only 'medium' is served", param="text.verbosity")
    if given.get("truncation") not in (None, "disabled"):
        return InvalidRequest(
            "only 'disabled': an input longer than the model's context is refused",
            param="truncation",
        )
    if given.get("include"):
        return InvalidRequest("no extra output is served; leave include empty", param="include")
    return None


def chat_tools(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    """Responses' ``{type: function, name, description, parameters, strict}`` as chat's
    ``{type: function, function: {...}}``; a built-in tool is refused naming it."""
    if not tools:
        return None
    converted = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise InvalidRequest("an object {type: 'function', name, ...}", param=f"tools.{i}")
        kind = tool.get("type")
        if kind != "function":
            raise InvalidRequest(
                f"{kind!r} tools are not served: only your own functions (type 'function')",
                param=f"tools.{i}.type",
            )
        function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
        converted.append({"type": "function", "function": function})
    return converted


def chat_tool_choice(choice: Any) -> Any:
    """``auto``/``none``/``required`` as they are; ``{type: function, name}`` as chat's."""
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    kind = choice.get("type") if isinstance(choice, Mapping) else type(choice).__name__
    raise InvalidRequest(
        f"{kind!r} is not served: 'auto', 'none', 'required' or {{type: 'function', name}}",
        param="tool_choice",
    )


def _text(content: Any, where: str) -> str:
    """A message's content: a string, or text parts joined; any other part is refused."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequest("a string or a list of text parts", param=where)
    pieces = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "refusal":
            pieces.append(str(part.get("refusal") or ""))
            continue
        if kind not in TEXT_PARTS:
            raise InvalidRequest(
                f"{kind!r} content is not served; only text", param=f"{where}.{j}.type"
            )
        pieces.append(str(part.get("text") or ""))
    return "".join(pieces)


def chat_messages(items: list[Any], where: str = "input") -> list[dict[str, Any]]:
    """Input (or stored) items as chat messages. Consecutive ``function_call`` items are one
    assistant turn's calls; a ``function_call_output`` is a ``tool`` message."""
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        field = f"{where}.{i}"
        if not isinstance(item, Mapping):
            raise InvalidRequest("an object: a message or a function call item", param=field)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise InvalidRequest(
                    f"role: one of {sorted(ROLES)} (got {role!r})", param=f"{field}.role"
                )
            text = _text(item.get("content"), f"{field}.content")
            messages.append({"role": "system" if role == "developer" else role, "content": text})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            last = messages[-1] if messages else None
            if last and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = _text(item.get("output"), f"{field}.output")
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": output}
            )
        elif kind == "reasoning":
            raise InvalidRequest("reasoning items are not served", param=f"{field}.type")
        else:
            raise InvalidRequest(
                f"{kind!r} items are not served: messages, function_call and "
                "function_call_output are",
                param=f"{field}.type",
            )
    return messages


def input_items(given: Any) -> list[dict[str, Any]]:
    """``input`` as a list of items (a string is one user message)."""
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    if not isinstance(given, list) or not given:
        raise InvalidRequest("a string or a non-empty list of items", param="input")
    return list(given)


def chat_body(
    given: Mapping[str, Any], history: list[dict[str, Any]], items: list[dict[str, Any]]
) -> dict[str, Any]:
    """The chat completion body for a Responses request: ``history`` (the items of the previous
    responses, oldest first), then this request's ``items``."""
    if problem := unserved_problem(given):
        raise problem
    messages = []
    if given.get("instructions"):
        messages.append({"role": "system", "content": str(given["instructions"])})
    messages += chat_messages(history, "previous_response_id")
    messages += chat_messages(items)
    body: dict[str, Any] = {"model": given["model"], "messages": messages}
    if given.get("max_output_tokens") is not None:
        body["max_completion_tokens"] = given["max_output_tokens"]
    for field in ("temperature", "top_p", "parallel_tool_calls"):
        if given.get(field) is not None:
            body[field] = given[field]
    if tools := chat_tools(given.get("tools")):
        body["tools"] = tools
    if (choice := chat_tool_choice(given.get("tool_choice"))) is not None:
        body["tool_choice"] = choice
    if given.get("stream"):
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body
