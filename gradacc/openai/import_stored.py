"""OpenAI's stored chat completions as training rows: the request's messages, then the answer.

A record, as a team exports it (the SDK's objects dumped as JSON, one a line), is either
- a ``ChatCompletion`` (``client.chat.completions.list()``: ``object`` "chat.completion") with the
  request's messages added as ``input_messages`` or ``messages`` (what
  ``client.chat.completions.messages.list(id)`` returns: ``ChatCompletionStoreMessage`` objects,
  oldest first, or its page ``{"data": [...]}``), and the request's ``tools`` if it had any; or
- ``{"request": {"messages", "model", "tools"?, "parallel_tool_calls"?}, "response":
  ChatCompletion}``, either of which may wrap its object in ``body`` (as a batch's lines do).
The row: the input messages made plain as this server renders a request when it answers one
(text parts joined, ``developer`` as ``system``, no ``name``), any earlier assistant turn at weight
0 (it was input, perhaps not this model's words), then the first choice's message, trained; the
request's ``tools`` and ``parallel_tool_calls`` kept. Refused, naming the field: no input messages,
no answer (null content without tool calls, a refusal), an answer cut short (finish_reason
``length`` or ``content_filter``), tool calls without the request's tools, content that is not
text, custom tools, legacy function calls.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gradacc.openai.import_rows import CHAT_FIELDS, Converted, Refused
from trainer_core.spec.chat import row_problems

CUT_SHORT = {
    "length": "the answer was cut at max_tokens; trained, it would teach stopping mid-answer",
    "content_filter": "the answer was cut by OpenAI's content filter",
}
NO_TOOLS = (
    "tools: the conversation calls a tool and the record has none (a stored completion does not "
    "keep its request's tools): add the request's tools beside its messages, or the model would "
    "learn calls it was never shown"
)
NO_INPUT = (
    "no input messages: add the request's messages as input_messages "
    "(client.chat.completions.messages.list) or export {request, response}"
)


def stored_completion_row(record: Mapping[str, Any]) -> Converted:
    """One stored completion as a chat row (the module's docstring)."""
    request, response = _request_and_response(record)
    if request.get("functions") is not None:
        raise Refused("functions: legacy function calling is not trained; use tools")
    where, inputs = _input_messages(record, request)
    messages = [_plain(m, f"{where}[{i}]", answer=False) for i, m in enumerate(inputs)]
    messages.append(_answer(response))
    row: dict[str, Any] = {"messages": messages}
    row |= {f: request[f] for f in CHAT_FIELDS if request.get(f) is not None}
    if "tools" not in row and any(m.get("tool_calls") for m in messages):
        raise Refused(NO_TOOLS)
    problems = row_problems(row)
    if problems:
        raise Refused(_in_record(problems[0], where, len(inputs)))
    model = response.get("model")
    return Converted(
        "messages", row, "stored-completions", model if isinstance(model, str) else None
    )


def _in_record(problem: str, where: str, answer_at: int) -> str:
    """A problem of the row's ``messages[k]`` named where the record holds that message."""
    found = re.match(r"messages\[(\d+)\]", problem)
    if found is None:
        return problem
    k = int(found.group(1))
    path = "choices[0].message" if k == answer_at else f"{where}[{k}]"
    return path + problem[found.end() :]


def _unwrapped(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise Refused(f"{where}: an object")
    body = value.get("body")
    return body if isinstance(body, Mapping) and "choices" not in value else value


def _request_and_response(record: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    if "response" not in record:
        return record, record  # a ChatCompletion carrying its request's messages
    response = _unwrapped(record["response"], "response")
    return _unwrapped(record.get("request") or {}, "request"), response


def _input_messages(record: Mapping[str, Any], request: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """(where they were found, the request's messages)."""
    found = [("request.messages", request.get("messages"))] if request is not record else []
    found += [(key, record.get(key)) for key in ("input_messages", "messages")]
    for where, messages in found:
        if isinstance(messages, Mapping) and "data" in messages:  # a messages.list page
            where, messages = f"{where}.data", messages["data"]
        if messages is not None:
            if not isinstance(messages, list) or not messages:
                raise Refused(f"{where}: a non-empty list of messages")
            return where, messages
    raise Refused(NO_INPUT)


def _answer(response: Mapping[str, Any]) -> dict[str, Any]:
    """The first choice's message (``index`` 0), checked whole."""
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        raise Refused("choices: a non-empty list (the completion's answers)")
    first = [c for c in choices if isinstance(c, Mapping) and c.get("index") == 0]
    choice = first[0] if first else choices[0]
    if not isinstance(choice, Mapping) or not isinstance(choice.get("message"), Mapping):
        raise Refused("choices[0].message: the answer's message object")
    reason = choice.get("finish_reason")
    if reason in CUT_SHORT:
        raise Refused(f"choices[0].finish_reason {reason!r}: {CUT_SHORT[reason]}")
    return _plain(choice["message"], "choices[0].message", answer=True)


def _plain(message: Any, where: str, *, answer: bool) -> dict[str, Any]:
    """A message as training renders it: role, text content, tool calls or the call answered."""
    if not isinstance(message, Mapping):
        raise Refused(f"{where}: an object with role and content")
    role = "assistant" if answer else message.get("role")
    if role == "function" or message.get("function_call") is not None:
        raise Refused(f"{where}: legacy function calling is not trained; use tools")
    if message.get("audio") is not None:
        raise Refused(f"{where}.audio: audio is not trained; text only")
    plain: dict[str, Any] = {"role": "system" if role == "developer" else role}
    plain["content"] = _text(message, where)
    calls = message.get("tool_calls") or None
    if calls is not None:
        plain["tool_calls"] = (
            [_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
            if isinstance(calls, list)
            else calls
        )
    if role == "tool":
        plain["tool_call_id"] = message.get("tool_call_id")
    if role == "assistant" and plain["content"] is None and calls is None:
        said = "the model refused (refusal), which" if message.get("refusal") else "nothing"
        raise Refused(f"{where}.content: null and no tool_calls: {said} is not an answer to train")
    if role == "assistant" and not answer:
        plain["weight"] = 0
    return plain


def _text(message: Mapping[str, Any], where: str) -> Any:
    """The content as one string: a list of parts (a request's ``content``, a stored message's
    ``content_parts``) joined when all are text; other values are left for the row's check."""
    content = message.get("content")
    parts, at = (content, "content") if isinstance(content, list) else (None, "")
    if parts is None and isinstance(message.get("content_parts"), list):
        parts, at = message["content_parts"], "content_parts"
    if parts is None:
        return content
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            raise Refused(f"{where}.{at}[{j}]: {kind!r} content is not trained; text only")
    joined = "".join(part["text"] for part in parts)
    return joined if at == "content" or content is None else content


def _call(call: Any, where: str) -> Any:
    """A function tool call with the fields training reads; a custom tool call is refused."""
    if not isinstance(call, Mapping):
        return call  # the row's check names it
    if call.get("type") == "custom":
        raise Refused(f"{where}: a custom tool call is not trained; function tools only")
    function = call.get("function")
    if isinstance(function, Mapping):
        function = {"name": function.get("name"), "arguments": function.get("arguments")}
    return {"id": call.get("id"), "type": call.get("type"), "function": function}
