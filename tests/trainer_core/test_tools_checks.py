"""The function-calling row checks (``trainer_core.spec.tools`` through ``row_problems``), each
message a user gets read in full: the field path and what it must be."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.tools_rows import tool_row, tool_rows
from trainer_core.spec.chat import known_template, row_problems
from trainer_core.spec.tools import template_refusal

Row = dict[str, Any]


def _set(path: str, value: Any) -> Callable[[Row], None]:
    """Set ``value`` at a dotted path (``messages.1.tool_calls``; list indices as numbers)."""

    def change(row: Row) -> None:
        *head, last = path.split(".")
        target: Any = row
        for key in head:
            target = target[int(key)] if key.isdigit() else target[key]
        target[int(last) if last.isdigit() else last] = value

    return change


def _drop(path: str) -> Callable[[Row], None]:
    def change(row: Row) -> None:
        *head, last = path.split(".")
        target: Any = row
        for key in head:
            target = target[int(key)] if key.isdigit() else target[key]
        del target[last]

    return change


# Row 1 of tool_rows: [user, assistant with 2 calls (call_1_a, call_1_b), tool, tool, assistant].
CASES = [
    (_set("tools", []), "tools: a non-empty list of {type: 'function', function: {name, ...}}"),
    (_set("tools.0", "get_weather"), "tools[0]: an object with type 'function' and function"),
    (_set("tools.0.type", "code"), "tools[0].type: 'function' (got 'code')"),
    (_set("tools.1.function", None),
     "tools[1].function: an object with name, description?, parameters?"),
    (_set("tools.1.function.name", "get weather"),
     "tools[1].function.name: 1 to 64 letters, digits, '_' or '-' (got 'get weather')"),
    (_set("tools.1.function.name", "get_weather"),
     "tools[1].function.name: 'get_weather' is declared twice"),
    (_set("tools.0.function.description", 3), "tools[0].function.description: a string"),
    (_set("tools.0.function.parameters", "city"),
     "tools[0].function.parameters: a JSON Schema object"),
    (_set("parallel_tool_calls", "no"), "parallel_tool_calls: true or false (got 'no')"),
    (_set("parallel_tool_calls", False),
     "messages[1].tool_calls: 2 calls in one message, but parallel_tool_calls is false (one "
     "call a message)"),
    (_set("messages.1.tool_calls", []),
     "messages[1].tool_calls: a non-empty list of {id, type: 'function', function: {name, "
     "arguments}}"),
    (_set("messages.1.tool_calls.1", "x"),
     "messages[1].tool_calls[1]: an object with id, type 'function' and function"),
    (_set("messages.1.tool_calls.0.id", ""), "messages[1].tool_calls[0].id: a non-empty string"),
    (_set("messages.1.tool_calls.1.id", "call_1_a"),
     "messages[1].tool_calls[1].id: 'call_1_a' is used by an earlier tool call"),
    (_set("messages.1.tool_calls.0.type", "fn"),
     "messages[1].tool_calls[0].type: 'function' (got 'fn')"),
    (_set("messages.1.tool_calls.0.function", "get_weather"),
     "messages[1].tool_calls[0].function: an object with name and arguments"),
    (_set("messages.1.tool_calls.0.function.name", ""),
     "messages[1].tool_calls[0].function.name: a non-empty string"),
    (_set("messages.1.tool_calls.0.function.arguments", {"city": "Rome"}),
     "messages[1].tool_calls[0].function.arguments: must be a JSON string of an object, like "
     """'{"city": "Paris"}' (got {'city': 'Rome'})"""),
    (_set("messages.1.tool_calls.0.function.arguments", "{city: Rome}"),
     "messages[1].tool_calls[0].function.arguments: must be a JSON string of an object, like "
     """'{"city": "Paris"}' (got '{city: Rome}')"""),
    (_set("messages.1.tool_calls.0.function.arguments", "[1, 2]"),
     "messages[1].tool_calls[0].function.arguments: must be a JSON string of an object, like "
     """'{"city": "Paris"}' (got '[1, 2]')"""),
    (_drop("messages.2.tool_call_id"),
     "messages[2].tool_call_id: the id of the assistant tool call this answers"),
    (_set("messages.2.tool_call_id", "call_9"),
     "messages[2].tool_call_id: no earlier assistant tool call has id 'call_9'"),
    (_set("messages.0.tool_call_id", "call_1_a"),
     "messages[0].tool_call_id: only tool messages answer a tool call"),
    (_set("messages.0.tool_calls", [{"id": "x"}]),
     "messages[0].tool_calls: only assistant messages make tool calls"),
    (_set("messages.1.content", 7), "messages[1].content: a string (or null, with tool_calls)"),
    (_drop("messages.1.tool_calls"), "messages[1].content: a string (or null, with tool_calls)"),
    (_set("messages.2.content", None), "messages[2].content: a string"),
]  # fmt: skip


def test_well_made_rows_pass() -> None:
    rows = tool_rows(10)
    assert any(r.get("parallel_tool_calls") for r in rows)
    assert [row_problems(r) for r in rows] == [[]] * 10
    # Content null and content beside calls are both allowed, as is a row without tools.
    assert tool_row(1)["messages"][1]["content"] is None
    assert tool_row(3)["messages"][2]["content"] == "Let me look."
    single = tool_row(0) | {"parallel_tool_calls": False}  # one call a message: allowed
    assert row_problems(single) == []


@pytest.mark.parametrize(("change", "message"), CASES)
def test_each_problem_is_named_by_its_field(change: Callable[[Row], None], message: str) -> None:
    """The first problem found; a broken call may leave its answers unanswerable too."""
    row = copy.deepcopy(tool_row(1))
    change(row)
    found = row_problems(row)
    assert found[0] == message
    assert all("tool_call_id: no earlier" in later for later in found[1:])


def test_a_tool_message_may_not_answer_a_later_call() -> None:
    row = copy.deepcopy(tool_row(2))
    messages = row["messages"]  # [user, assistant (call_2_a), tool, assistant]
    messages[1], messages[2] = messages[2], messages[1]
    assert row_problems(row)[0] == (
        "messages[1].tool_call_id: no earlier assistant tool call has id 'call_2_a'"
    )


def test_a_row_with_only_a_tool_call_trains_it() -> None:
    row = copy.deepcopy(tool_row(2))
    row["messages"] = row["messages"][:2]  # the user's question and the assistant's call
    assert row_problems(row) == []
    row["messages"][1]["weight"] = 0
    assert row_problems(row) == ["messages: at least one assistant message to train (weight not 0)"]


def test_templates_known_without_rendering() -> None:
    chatml = known_template("chatml", "builtin:tiny-gpt2")
    assert chatml is not None and known_template(None, "builtin:tiny-chat") == chatml
    assert known_template(None, "owner/model") is None  # the tokenizer's: read as the job runs
    assert template_refusal(chatml, tools=True, tool_calls=True) is None
    plain = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
    assert template_refusal(plain, tools=False, tool_calls=False) is None
    assert template_refusal(plain, tools=True, tool_calls=False) == (
        "the chat template never reads `tools`: the file's tools would not be rendered; give "
        "chat_template 'chatml' or a template that renders tools"
    )
    with_tools = "{{ tools | tojson }}" + plain
    assert template_refusal(with_tools, tools=True, tool_calls=True) == (
        "the chat template never reads a message's `tool_calls`: the assistant's tool calls "
        "would not be trained; give chat_template 'chatml' or a template that renders them"
    )
