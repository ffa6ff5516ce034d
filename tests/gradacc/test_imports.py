"""The import's conversion (``gradacc.openai.imports``), pure: each input form becomes the row it
must, every row written passes the trainer's own check, and each refusal names its line and why."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from gradacc.errors import InvalidRequest
from gradacc.openai.imports import KEPT_REFUSALS, MAX_LINE_BYTES, ImportReport, import_lines
from tests.stored_completions import completion, conversation, expected_row, export, record
from trainer_core.spec.chat import row_problems

USER = {"role": "user", "content": "2 + 2?"}
ANSWER = {"role": "assistant", "content": "4."}


def run(lines: list[Any], fmt: str = "auto") -> tuple[ImportReport, list[dict[str, Any]]]:
    """Import ``lines`` (objects are dumped as JSON, bytes and text taken as written)."""
    raw = b"".join(
        (line if isinstance(line, bytes) else (line if isinstance(line, str) else json.dumps(line)).encode()) + b"\n"
        for line in lines
    )  # fmt: skip
    out = io.BytesIO()
    report = import_lines(io.BytesIO(raw), out, fmt)
    return report, [json.loads(line) for line in out.getvalue().splitlines()]


def refusal(line: Any, fmt: str = "auto") -> str:
    """Why the import refuses a file of ``line`` alone."""
    report, rows = run([line], fmt)
    assert rows == [] and report.refused_rows == 1
    ((number, reason),) = report.refused
    assert number == 1
    return reason


def test_a_stored_completions_export_becomes_its_conversations() -> None:
    report, rows = run([record(i) for i in range(10)])
    assert rows == [expected_row(i) for i in range(10)]
    assert all(row_problems(row) == [] for row in rows)  # what the trainer checks
    assert (report.kind, report.rows, report.refused_rows) == ("messages", 10, 0)
    assert report.forms == {"stored-completions": 10}
    assert report.models == {"gpt-4o-mini-2024-07-18": 10}
    assert report.bytes == sum(len(json.dumps(r, ensure_ascii=False)) + 1 for r in rows)


def test_an_earlier_answer_in_the_request_is_not_trained() -> None:
    (row,) = run([record(2)])[1]
    weights = [m.get("weight") for m in row["messages"] if m["role"] == "assistant"]
    assert weights == [0, None]  # the stored answer, last, trains; the input's does not


def test_the_other_export_shapes_give_the_same_row() -> None:
    messages, answer, _ = conversation(0)
    done = completion(0, answer).model_dump(mode="json")
    page = done | {"input_messages": {"object": "list", "data": messages, "has_more": False}}
    batch_line = {"request": {"body": {"messages": messages}}, "response": {"status_code": 200, "body": done}}  # fmt: skip
    as_messages = done | {"messages": messages}
    assert run([page, batch_line, as_messages])[1] == [expected_row(0)] * 3


BAD_RECORDS: dict[str, tuple[Callable[[], Any], str]] = {
    "no input messages": (lambda: completion(0, ANSWER).model_dump(mode="json"), "no input messages"),
    "cut at max_tokens": (lambda: json.loads(export(1, truncated=1)), "finish_reason 'length'"),
    "content filter": (
        lambda: {"request": {"messages": [USER]}, "response": completion(0, ANSWER, finish_reason="content_filter").model_dump(mode="json")},
        "content filter",
    ),
    "a refusal": (
        lambda: {"request": {"messages": [USER]}, "response": completion(0, {"content": None}).model_dump(mode="json") | {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": None, "refusal": "I can't."}}]}},
        "choices[0].message.content: null and no tool_calls: the model refused",
    ),
    "an image": (
        lambda: {"request": {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "response": completion(0, ANSWER).model_dump(mode="json")},
        "request.messages[0].content[0]: 'image_url' content is not trained",
    ),
    "a custom tool call": (
        lambda: {"request": {"messages": [USER]}, "response": completion(0, {"content": None, "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "f", "input": "x"}}]}).model_dump(mode="json")},
        "choices[0].message.tool_calls[0]: a custom tool call is not trained",
    ),
    "a tool result answering no call": (
        lambda: completion(0, ANSWER).model_dump(mode="json") | {"input_messages": [USER, {"role": "tool", "tool_call_id": "nope", "content": "1"}]},
        "input_messages[1].tool_call_id: no earlier assistant tool call has id 'nope'",
    ),
    "tool calls without the tools": (
        lambda: record(3) | {"request": {"messages": conversation(3)[0]}},
        "tools: the conversation calls a tool and the record has none",
    ),
    "legacy functions": (
        lambda: {"request": {"messages": [USER], "functions": [{"name": "f"}]}, "response": completion(0, ANSWER).model_dump(mode="json")},
        "functions: legacy function calling",
    ),
    "a bad role": (
        lambda: {"request": {"messages": [{"role": "human", "content": "hi"}]}, "response": completion(0, ANSWER).model_dump(mode="json")},
        "request.messages[0].role: one of system, developer, user, assistant, tool (got 'human')",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_RECORDS)
def test_a_bad_stored_completion_is_refused_saying_why(case: str) -> None:
    make, why = BAD_RECORDS[case]
    assert why in refusal(make())


def test_refusals_name_their_lines_and_the_rest_is_imported() -> None:
    lines: list[Any] = [record(i) for i in range(6)]
    lines[1] = "{not json"
    lines[3] = "[1, 2]"
    lines[4] = {"id": "x", "object": "thing"}
    lines.insert(5, "")  # a blank line is no row, and still a line
    report, rows = run(lines)
    assert rows == [expected_row(0), expected_row(2), expected_row(5)]
    assert [n for n, _ in report.refused] == [2, 4, 5]
    reasons = [r for _, r in report.refused]
    assert reasons[0].startswith("not valid JSON (at column 2")
    assert reasons[1] == "a JSON object per line (got list)"
    assert reasons[2].startswith("no known form") and "its keys: id, object" in reasons[2]
    assert report.lines == 6  # blank lines are not counted


def test_a_line_over_the_limit_is_refused_and_the_next_read() -> None:
    long = json.dumps({"text": "x" * (MAX_LINE_BYTES + 10)})
    report, rows = run([long, {"text": "short"}])
    assert report.refused == [(1, f"over {MAX_LINE_BYTES} bytes")] and rows == [{"text": "short"}]


def test_a_file_trains_one_kind_of_row() -> None:
    report, rows = run(
        [{"prompt": "a", "completion": "b"}, record(0), {"prompt": "c", "completion": "d"}]
    )
    assert rows == [{"prompt": "a", "completion": "b"}, {"prompt": "c", "completion": "d"}]
    assert report.refused == [(2, "a chat (messages) row in a file of prompt-completion rows (line 1 set the kind: a file trains one kind of row)")]  # fmt: skip


def test_openai_fine_tuning_rows_pass_as_they_are() -> None:
    chat = {"messages": [USER, {**ANSWER, "weight": 0}, USER, {**ANSWER, "weight": 1}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "parallel_tool_calls": False, "metadata": {"x": "y"}}  # fmt: skip
    preference = {"input": {"messages": [USER]}, "preferred_output": [ANSWER],
                  "non_preferred_output": [{"role": "assistant", "content": "5."}]}  # fmt: skip
    legacy = {"prompt": "2 + 2 =", "completion": " 4"}
    trl = {"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5"}
    _, rows = run([chat, {"messages": [USER, ANSWER]}], "openai")
    assert rows == [
        {k: v for k, v in chat.items() if k != "metadata"},
        {"messages": [USER, ANSWER]},
    ]
    assert run([preference, trl], "openai")[1] == [preference, trl]
    assert run([legacy], "openai")[1] == [legacy]
    assert "0 or 1 (got 0.5)" in refusal({"messages": [USER, {**ANSWER, "weight": 0.5}]})
    assert "a stored-completions record, and this import reads openai" in refusal(
        record(0), "openai"
    )
    assert "a text record" in refusal({"text": "hello"}, "openai")


def test_together_rows_follow_together_weights() -> None:
    """Together trains a message unless its weight is 0, and any weight in a row turns its
    inputs on: what it would train must be an assistant message here."""
    masked = {"messages": [{**USER, "weight": 0}, {**ANSWER, "weight": 1}]}
    assert run([masked])[1] == [{"messages": [USER, {**ANSWER, "weight": 1}]}]
    trained_user = {"messages": [{**USER, "weight": 1}, ANSWER]}
    assert refusal(trained_user).startswith("messages[0]: Together trains a user message unless its weight is 0 (this one: weight 1)")  # fmt: skip
    unweighted_system = {
        "messages": [{"role": "system", "content": "s"}, {**USER, "weight": 0}, ANSWER]
    }
    assert "(this one: no weight, in a row with weights)" in refusal(unweighted_system)
    only_answers = {"messages": [USER, {**ANSWER, "weight": 1}]}
    assert run([only_answers])[1] == [only_answers]  # by OpenAI's rules: users never train
    assert "Together trains a user message" in refusal(only_answers, "together")
    assert run([{"messages": [USER, ANSWER]}], "together")[1] == [{"messages": [USER, ANSWER]}]
    report, rows = run([{"text": "one"}, {"text": "two", "source": "web"}], "together")
    assert (report.kind, rows) == ("text", [{"text": "one"}, {"text": "two"}])


def test_a_sample_weight_is_honoured_exactly_or_refused() -> None:
    row = {"messages": [USER, ANSWER]}
    assert run([row | {"weight": 1}, row | {"weight": 1.0}])[1] == [row, row]
    assert refusal(row | {"weight": 0}) == "weight 0: the row trains nothing, so it is left out"
    for weight in (2.5, 0.3, -1, True):
        assert "cannot be trained exactly" in refusal(row | {"weight": weight})
    assert "cannot be trained exactly" in refusal({"prompt": "a", "completion": "b", "weight": 3})


def test_the_formats_read_only_their_own_records() -> None:
    assert "a messages record, and this import reads stored-completions" in refusal(
        {"messages": [USER, ANSWER]}, "stored-completions"
    )
    assert run([record(0)], "stored-completions")[1] == [expected_row(0)]
    with pytest.raises(InvalidRequest, match="'csv' is not one of auto") as refused:
        run([record(0)], "csv")
    assert refused.value.param == "format"


def test_a_json_array_is_refused_whole() -> None:
    with pytest.raises(InvalidRequest, match="this file is a JSON array") as refused:
        run([json.dumps([record(0), record(1)])])
    assert refused.value.param == "file"


def test_every_refusal_is_counted_and_the_first_ones_kept() -> None:
    report, rows = run(["{"] * (KEPT_REFUSALS + 50) + [record(0)])
    assert rows == [expected_row(0)] and report.refused_rows == KEPT_REFUSALS + 50
    assert len(report.refused) == KEPT_REFUSALS and report.refused[-1][0] == KEPT_REFUSALS
    summary = report.summary(kept=20)
    assert len(summary["refused"]) == 20 and summary["refused_rows"] == KEPT_REFUSALS + 50
