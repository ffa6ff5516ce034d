"""The evals kernel: criteria and data sources checked with the field at fault named, an item
sampled and graded (its status from every criterion, a server that cannot answer now leaving it
to be asked again), a run's counts; a distillation's prompt rows and answers."""

from __future__ import annotations

from typing import Any

import pytest

from gradacc import distill
from gradacc.errors import InvalidRequest
from gradacc.evals.config import item_errors, parse_config
from gradacc.evals.criteria import parse_criteria
from gradacc.evals.grade import grade_item
from gradacc.evals.results import summary
from gradacc.evals.sources import check_items, file_rows, messages_for, parse_run_source
from trainer_core.graders import Grading

EQ = {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
      "reference": "{{item.answer}}", "operation": "eq"}  # fmt: skip
LONG = {"type": "python", "name": "long", "pass_threshold": 0.5,
        "source": "def grade(sample, item):\n    return len(sample['output_text']) / 4\n"}  # fmt: skip
RUN = {"type": "completions", "model": "m",
       "input_messages": {"type": "template", "template": [
           {"role": "developer", "content": "Answer briefly."},
           {"role": "user", "content": {"type": "input_text", "text": "{{item.question}}"}}]},
       "sampling_params": {"temperature": 0, "max_completion_tokens": 8},
       "source": {"type": "file_content", "content": [{"item": {"question": "2+2", "answer": "4"}}]}}  # fmt: skip


def _refused(call: Any, *args: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        call(*args)
    return caught.value


def test_criteria_name_the_field_at_fault_and_pass_by_their_rule() -> None:
    criteria = parse_criteria([EQ, LONG])
    assert [c.passed(1.0) for c in criteria] == [True, True]
    assert [c.passed(0.5) for c in criteria] == [False, True]
    bad = {**EQ, "operation": "regex"}
    assert _refused(parse_criteria, [LONG, bad]).param == "testing_criteria[1].operation"
    assert _refused(parse_criteria, [EQ, EQ]).param == "testing_criteria[1].name"
    similar = {"type": "text_similarity", "name": "s", "input": "a", "reference": "b",
               "evaluation_metric": "bleu"}  # fmt: skip
    assert _refused(parse_criteria, [similar]).param == "testing_criteria[0].pass_threshold"
    label = {"type": "label_model", "name": "l", "model": "m", "labels": ["y", "n"],
             "passing_labels": ["y"], "input": [{"role": "user", "content": "{{item.a}}"}]}  # fmt: skip
    (only,) = parse_criteria([label])
    assert only.passed(1.0) and not only.passed(0.0)
    score = {"type": "score_model", "name": "sc", "model": "m", "range": [0, 10],
             "input": [{"role": "user", "content": "x"}]}  # fmt: skip
    (top,) = parse_criteria([score])  # no threshold: the top of its range
    assert top.passed(10.0) and not top.passed(9.0)


def test_a_config_checks_its_schema_and_its_items() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}},
              "required": ["answer"]}  # fmt: skip
    config = parse_config({"type": "custom", "item_schema": schema})
    assert config["schema"]["properties"]["item"] == schema
    assert item_errors(config, {"answer": "4"}) is None
    assert item_errors(config, {"answer": 4}) == "item.answer: 4 is not of type 'string'"
    refusal = _refused(check_items, config, [{"item": {"answer": "4"}}, {"item": {}}], "x")
    assert refusal.param == "x" and "item 1" in refusal.message
    assert _refused(parse_config, {"type": "logs"}).param == "data_source_config.type"
    bad_schema = {"type": "custom", "item_schema": {"type": "no such type"}}
    assert _refused(parse_config, bad_schema).param == "data_source_config.item_schema"


def test_a_run_source_is_checked_and_renders_its_messages() -> None:
    plan = parse_run_source(RUN)
    assert plan.sampling == {"temperature": 0, "max_completion_tokens": 8}
    assert messages_for(plan, {"question": "2+2"}) == [
        {"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "2+2"}]  # fmt: skip
    tools = {**RUN, "sampling_params": {"tools": [{"type": "function"}]}}
    assert _refused(parse_run_source, tools).param == "data_source.sampling_params.tools"
    stored = {**RUN, "source": {"type": "stored_completions"}}
    assert _refused(parse_run_source, stored).param == "data_source.source.type"
    assert _refused(parse_run_source, {**RUN, "model": ""}).param == "data_source.model"
    lines = '{"item": {"a": 1}, "sample": {"output_text": "x"}}\n\n{"a": 2}\n' + (
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}'
    )
    rows = file_rows(lines)
    assert rows[1] == {"item": {"a": 2}}
    assert rows[2]["item"] == {"input": [{"role": "user", "content": "hi"}], "reference": "yo"}
    reference = parse_run_source({**RUN, "input_messages": {"type": "item_reference",
                                                            "item_reference": "{{item.input}}"}})  # fmt: skip
    assert messages_for(reference, rows[2]["item"]) == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="line 2: not JSON"):
        file_rows('{"a": 1}\nnot json\n')


def _answer(text: str) -> dict[str, Any]:
    return {"choices": [{"message": {"content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}  # fmt: skip


def test_an_item_is_sampled_graded_and_counted() -> None:
    plan, criteria = parse_run_source(RUN), parse_criteria([EQ, LONG])
    sent: list[dict[str, Any]] = []

    def ask(body: dict[str, Any]) -> tuple[int, Any]:
        sent.append(body)
        return 200, _answer("4")

    row = {"item": {"question": "2+2", "answer": "4"}}
    status, record = grade_item(plan, criteria, row, 0, ask=ask, grading=Grading())  # type: ignore[misc]
    assert sent[0]["model"] == "m" and sent[0]["temperature"] == 0
    assert status == "fail"  # "4" is exact, but a quarter of the long criterion's length
    assert [(r["name"], r["score"], r["passed"]) for r in record["results"]] == [
        ("exact", 1.0, True), ("long", 0.25, False)]  # fmt: skip
    assert record["sample"]["output"] == [{"role": "assistant", "content": "4"}]
    assert record["usage"] == {"m": {"invocation_count": 1, "prompt_tokens": 5,
                                     "completion_tokens": 2, "total_tokens": 7}}  # fmt: skip
    busy = grade_item(plan, criteria, row, 0, ask=lambda b: (503, None), grading=Grading())
    assert busy is None  # asked again later, not kept
    gone = grade_item(plan, criteria, row, 1, ask=lambda b: (404, {"error": {
        "code": "model_not_found", "message": "no"}}), grading=Grading())  # fmt: skip
    assert gone is not None and gone[0] == "error" and gone[1]["results"] == []
    assert gone[1]["sample"]["error"]["code"] == "model_not_found"
    counts = summary(3, [(status, record), gone], ["exact", "long"])
    assert counts["result_counts"] == {"total": 3, "passed": 0, "failed": 1, "errored": 1}
    assert counts["per_testing_criteria_results"] == [
        {"testing_criteria": "exact", "passed": 1, "failed": 0},
        {"testing_criteria": "long", "passed": 0, "failed": 1}]  # fmt: skip


def test_a_jsonl_run_grades_the_samples_its_items_carry() -> None:
    plan = parse_run_source({"type": "jsonl", "source": RUN["source"]})
    row = {"item": {"answer": "4"}, "sample": {"output_text": "4"}}
    never = grade_item(plan, parse_criteria([EQ]), row, 0, ask=lambda b: (500, None),
                       grading=Grading())  # fmt: skip
    assert never is not None and never[0] == "pass"
    missing = grade_item(plan, parse_criteria([EQ]), {"item": {}}, 1, ask=lambda b: (500, None),
                         grading=Grading())  # fmt: skip
    assert missing is not None and missing[0] == "error"


def test_distillation_rows_and_answers() -> None:
    text = ('{"prompt": "hi"}\n'
            '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},'
            ' {"role": "assistant", "content": "old"}]}\n')  # fmt: skip
    prompts = distill.parse_prompts(text)
    assert prompts == [[{"role": "user", "content": "hi"}],
                       [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]]  # fmt: skip
    with pytest.raises(ValueError, match="line 2"):
        distill.parse_prompts('{"prompt": "a"}\n{"messages": []}\n')
    with pytest.raises(ValueError, match=r"sampling\.n"):
        distill.check_sampling({"n": 2})
    answered = distill.answer_row(
        "t", {"temperature": 0}, prompts[1], lambda b: (200, _answer("new"))
    )
    assert answered is not None and answered[0] == "ok"
    assert answered[1]["messages"][-1] == {"role": "assistant", "content": "new"}
    assert distill.answer_row("t", {}, prompts[0], lambda b: (429, None)) is None
    refused = distill.answer_row(
        "t", {}, prompts[0], lambda b: (400, {"error": {"message": "long"}})
    )
    assert refused == ("error", {"error": "400: long"})
    kept = [(0, "ok", answered[1]), (1, "error", refused[1])]
    assert distill.training_rows(kept) == [{"messages": answered[1]["messages"]}]
    assert distill.row_errors(kept) == [{"line": 2, "message": "400: long"}]
    assert distill.usage_of([answered[1]]) == {"prompt_tokens": 5, "completion_tokens": 2,
                                              "total_tokens": 7}  # fmt: skip
