"""What the API checks of tools in a chat request before a predict server sees it (the server
decides whether the model's template renders them): ``tools`` well made, ``tool_choice`` only
"auto" or "none", an assistant's ``tool_calls`` and a ``tool`` message's ``tool_call_id`` passed
on in the shape training renders, each refusal a 400 naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from gradacc.errors import InvalidRequest
from gradacc.openai.chat_checks import check_tools, forwarded_body
from gradacc.openai.chat_requests import ChatCompletionRequest

TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
MESSAGES: list[dict[str, Any]] = [
    {"role": "developer", "content": "be brief"},
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sunny"}]},
]


@pytest.mark.parametrize(("given", "param"), [
    ({"tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),
    ({"tool_choice": "auto"}, "tool_choice"),  # without tools
    ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "weather"}}},
     "tool_choice"),
])  # fmt: skip
def test_what_is_not_honoured_is_a_400_naming_it(given: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_tools(given)
    assert refused.value.param == param
    if param == "tool_choice" and "tools" in given:  # why, not only what
        assert "constrained to the template's call format" in refused.value.message


@pytest.mark.parametrize("choice", [None, "auto", "none"])
@pytest.mark.parametrize("parallel", [True, False])
def test_tools_with_auto_or_none_pass(choice: str | None, parallel: bool) -> None:
    check_tools({"tools": TOOLS, "tool_choice": choice, "parallel_tool_calls": parallel})


def test_tool_messages_pass_in_the_shape_training_renders() -> None:
    body = ChatCompletionRequest(model="builtin:tiny-chat", messages=MESSAGES, tools=TOOLS,
                                 tool_choice="auto")  # fmt: skip
    sent = forwarded_body(body)
    assert sent["tools"] == TOOLS and sent["tool_choice"] == "auto"
    assert sent["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
    ]


@pytest.mark.parametrize(("change", "param"), [
    ({3: {"role": "tool", "tool_call_id": "call_9", "content": "x"}}, "messages.3.tool_call_id"),
    ({2: {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "weather",
                                                                     "arguments": "{"}}]}},
     "messages.2.tool_calls"),
    ({1: {"role": "user", "content": "x", "tool_calls": [CALL]}}, "messages.1"),
    ({1: {"role": "function", "name": "f", "content": "x"}}, "messages.1"),
])  # fmt: skip
def test_bad_tool_messages_are_a_400_naming_them(change: dict[int, Any], param: str) -> None:
    messages = [change.get(i, m) for i, m in enumerate(MESSAGES)]
    with pytest.raises(InvalidRequest) as refused:
        forwarded_body(ChatCompletionRequest(model="builtin:tiny-chat", messages=messages))
    assert refused.value.param == param
