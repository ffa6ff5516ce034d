"""The Responses API over chat completions, the pure part: a request's items become the chat
messages a template renders (calls and their outputs in chat's shape, a previous response's
output before the new input), and a chat stream's chunks become OpenAI's typed events whose
deltas join to the text the whole completion gives, in the order the SDK's types expect."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response as SdkResponse
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from gradacc.errors import InvalidRequest
from gradacc.openai.responses_input import chat_body
from gradacc.openai.responses_output import StreamEvents, from_completion, skeleton

GIVEN = {"model": "m", "input": "unused", "instructions": "Be brief.", "max_output_tokens": 9}
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}


def test_items_become_chat_messages_in_order() -> None:
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "hello", "annotations": []}]},
    ]  # fmt: skip
    items = [
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a": 1}'},
        {"type": "function_call", "call_id": "call_2", "name": "add", "arguments": '{"a": 2}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "1"},
        {"role": "developer", "content": "then"},
    ]
    tools = [{"type": "function", "name": "add", "parameters": {"type": "object"}}]
    body = chat_body(GIVEN | {"tools": tools, "tool_choice": {"type": "function", "name": "add"}},
                     history, items)  # fmt: skip
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "assistant", "content": None, "tool_calls": [
            CALL, {**CALL, "id": "call_2", "function": {"name": "add", "arguments": '{"a": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "1"},
        {"role": "system", "content": "then"},
    ]  # fmt: skip
    assert body["max_completion_tokens"] == 9
    assert body["tools"] == [{"type": "function", "function": {"name": "add",
                                                              "parameters": {"type": "object"}}}]  # fmt: skip
    assert body["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    with pytest.raises(InvalidRequest) as refused:
        chat_body(GIVEN, [], [{"role": "tool", "content": "x"}])
    assert refused.value.param == "input.0.role"


def _chunk(content: str | None = None, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    if content is not None:
        delta["content"] = content
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": None}


def _events(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events = StreamEvents(skeleton(GIVEN, "resp_1"))
    found = list(events.start())
    for chunk in chunks:
        found += list(events.chunk(chunk))
    return found + list(events.end())


USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def test_a_stream_becomes_typed_events_that_join_to_the_whole_answer() -> None:
    chunks = [_chunk("", role="assistant"), _chunk("he"), _chunk("llo"), _chunk(finish="length"),
              {"choices": [], "usage": USAGE}]  # fmt: skip
    events = _events(chunks)
    parsed = [TypeAdapter(ResponseStreamEvent).validate_python(e) for e in events]  # SDK's types
    kinds = [e.type for e in parsed]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.output_text.delta",
                     "response.output_text.delta", "response.output_text.done",
                     "response.content_part.done", "response.output_item.done",
                     "response.incomplete"]  # fmt: skip
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    final = SdkResponse.model_validate(events[-1]["response"])
    message = {"role": "assistant", "content": "hello"}
    completion = {"choices": [{"message": message, "finish_reason": "length"}], "usage": USAGE}
    whole = from_completion(skeleton(GIVEN, "resp_2"), completion)
    assert deltas == final.output_text == SdkResponse.model_validate(whole).output_text == "hello"
    assert final.status == whole["status"] == "incomplete"
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == (
        5,
        3,
    )


def test_calls_come_as_function_call_items_and_a_broken_stream_fails() -> None:
    call = {"index": 0, **CALL}
    events = _events([_chunk(tool_calls=[call], finish="tool_calls")])
    final = SdkResponse.model_validate(events[-1]["response"])
    assert events[-1]["type"] == "response.completed"
    (item,) = final.output
    assert item.type == "function_call"
    assert (item.call_id, item.name, item.arguments) == ("call_1", "add", '{"a": 1}')
    broken = _events([_chunk("he")])
    assert broken[-1]["type"] == "response.failed"
    assert broken[-1]["response"]["error"]["code"] == "server_error"
