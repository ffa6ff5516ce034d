"""The graders, each type and operation, against hand-computed scores or the libraries' own
outputs; the grader dicts parsed as the SDK sends them, a bad field named by its path."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trainer_core.graders import ChatReply, GraderFailed, Grading, run_grader
from trainer_core.graders.formula import evaluate
from trainer_core.graders.templates import render, sample_namespace
from trainer_core.graders.text import string_check, text_similarity
from trainer_core.spec.graders import error_param, parse_grader

SAMPLE = "the cat sat on the mat"
REFERENCE = "the cat is on the mat"


def check(operation: str, reference: str = "{{ item.answer }}") -> dict[str, Any]:
    return {"type": "string_check", "name": "c", "operation": operation,
            "input": "{{ sample.output_text }}", "reference": reference}  # fmt: skip


def refusal(grader: Any) -> tuple[str, str]:
    with pytest.raises((ValidationError, ValueError)) as refused:
        parse_grader(grader)
    if isinstance(refused.value, ValidationError):
        first = refused.value.errors()[0]
        return error_param(first["loc"]), first["msg"]
    return "grader.type", str(refused.value)


@pytest.mark.parametrize(
    ("operation", "value", "reference", "score"),
    [
        ("eq", "Paris", "Paris", 1.0), ("eq", "paris", "Paris", 0.0),
        ("ne", "paris", "Paris", 1.0), ("ne", "Paris", "Paris", 0.0),
        ("like", "It is Paris.", "Paris", 1.0), ("like", "It is paris.", "Paris", 0.0),
        ("ilike", "IT IS PARIS.", "paris", 1.0), ("ilike", "Lyon", "paris", 0.0),
    ],
)  # fmt: skip
def test_string_check(operation: str, value: str, reference: str, score: float) -> None:
    assert string_check(operation, value, reference) == score
    result = run_grader(parse_grader(check(operation)), value, {"answer": reference})
    assert result.reward == score and result.failed_kinds == []


def test_text_similarity_by_hand() -> None:
    """Six tokens each, five shared: rouge_1 = 5/6; bigrams 3 of 5 shared: rouge_2 = 3/5; GLEU
    counts 1..4-grams, 9 of 18 shared: 0.5; identical texts score 1 on every metric."""
    assert text_similarity("rouge_1", SAMPLE, REFERENCE) == pytest.approx(5 / 6)
    assert text_similarity("rouge_2", SAMPLE, REFERENCE) == pytest.approx(3 / 5)
    assert text_similarity("rouge_3", SAMPLE, REFERENCE) == pytest.approx(1 / 4)
    assert text_similarity("rouge_4", SAMPLE, REFERENCE) == 0.0
    assert text_similarity("rouge_l", SAMPLE, REFERENCE) == pytest.approx(5 / 6)
    assert text_similarity("gleu", SAMPLE, REFERENCE) == pytest.approx(0.5)
    # Indel: 22 + 21 characters, a longest common subsequence of 20: 2 * 20 / 43.
    assert text_similarity("fuzzy_match", SAMPLE, REFERENCE) == pytest.approx(40 / 43)
    for metric in ("fuzzy_match", "bleu", "gleu", "rouge_1", "rouge_5", "rouge_l"):
        assert text_similarity(metric, SAMPLE, SAMPLE) == pytest.approx(1.0)


def test_bleu_is_sacrebleus_sentence_bleu() -> None:
    import sacrebleu

    expected = sacrebleu.sentence_bleu(SAMPLE, [REFERENCE]).score / 100
    grader = {"type": "text_similarity", "name": "b", "evaluation_metric": "bleu",
              "input": "{{ sample.output_text }}", "reference": "{{ item.ref }}"}  # fmt: skip
    result = run_grader(parse_grader(grader), SAMPLE, {"ref": REFERENCE})
    assert result.reward == pytest.approx(expected) and 0.1 < result.reward < 0.9


@pytest.mark.parametrize("metric", ["cosine", "meteor"])
def test_a_metric_the_server_lacks_is_refused_by_name(metric: str) -> None:
    grader = {"type": "text_similarity", "name": "t", "evaluation_metric": metric,
              "input": "a", "reference": "b"}  # fmt: skip
    param, message = refusal(grader)
    assert param == "grader.evaluation_metric" and metric in message and "not served" in message


def test_templates_render_as_openai_renders_them() -> None:
    namespaces = {"sample": sample_namespace('{"x": 4, "tags": ["a", "b"]}'),
                  "item": {"q": "2+2", "n": [1, {"k": "v"}]}}  # fmt: skip
    text = "{{sample.output_json.x}}|{{ item.q }}|{{ item.n[1].k }}|{{ item.n }}"
    assert render(text, namespaces) == '4|2+2|v|[1, {"k": "v"}]'
    assert render("{{ sample.output_json.tags[1] }}", namespaces) == "b"
    with pytest.raises(GraderFailed) as missing:
        render("{{ item.nope }}", namespaces)
    assert missing.value.kind == "invalid_variable_error"
    plain = {"sample": sample_namespace("not json"), "item": {}}
    with pytest.raises(GraderFailed) as unparsed:
        render("{{ sample.output_json.x }}", plain)
    assert unparsed.value.kind == "sample_parse_error"


def test_a_failed_template_scores_zero_and_is_counted() -> None:
    result = run_grader(parse_grader(check("eq", "{{ item.missing }}")), "4", {"answer": "4"})
    assert result.reward == 0.0 and result.failed_kinds == ["invalid_variable_error"]


def test_a_template_outside_item_and_sample_is_refused() -> None:
    param, message = refusal(check("eq", "{{ os.environ }}"))
    assert param == "grader.reference" and "item.<path> or sample.<path>" in message


def test_formula() -> None:
    values = {"a": 1.0, "b": 0.25}
    assert evaluate("(a + b) / 2", values) == pytest.approx(0.625)
    assert evaluate("a ^ 2 - b * 4 + max(a, b) - min(a, b) + abs(-b)", values) == 1.0
    assert evaluate("sqrt(b) + floor(1.7) + ceil(0.2) + log(exp(1))", values) == 3.5
    with pytest.raises(GraderFailed) as by_zero:
        evaluate("a / (b - 0.25)", values)
    assert by_zero.value.kind == "formula_parse_error"


@pytest.mark.parametrize(
    "formula",
    ["__import__('os')", "a.__class__", "c + a", "a if b else 1", "[a][0]", "a % 2", "'x'"],
)
def test_a_formula_beyond_arithmetic_is_refused(formula: str) -> None:
    grader = {"type": "multi", "name": "m", "calculate_output": formula,
              "graders": {"a": check("eq"), "b": check("ne")}}  # fmt: skip
    param, message = refusal(grader)
    assert param == "grader" and "calculate_output" in message


def test_multi_combines_named_graders() -> None:
    grader = {"type": "multi", "name": "m", "calculate_output": "0.75 * exact + 0.25 * close",
              "graders": {"exact": check("eq"),
                          "close": {"type": "text_similarity", "name": "close",
                                    "evaluation_metric": "rouge_1", "input":
                                    "{{ sample.output_text }}", "reference": "{{ item.answer }}"}}}  # fmt: skip
    result = run_grader(parse_grader(grader), SAMPLE, {"answer": REFERENCE})
    assert result.sub_rewards == {"exact": 0.0, "close": pytest.approx(5 / 6)}
    assert result.reward == pytest.approx(0.25 * 5 / 6)


def test_a_bad_sub_grader_is_named_by_its_path() -> None:
    grader = {"type": "multi", "name": "m", "calculate_output": "a",
              "graders": {"a": check("equals")}}  # fmt: skip
    param, _ = refusal(grader)
    assert param == "grader.graders.a.operation"
    param, _ = refusal({**check("eq"), "extra": 1})
    assert param == "grader.extra"
    param, message = refusal({"type": "label_model", "name": "l", "model": "m", "input": [],
                              "labels": ["a"], "passing_labels": ["a"]})  # fmt: skip
    assert param == "grader.type" and "only inside a multi" in message


def test_a_python_source_without_grade_is_refused() -> None:
    param, message = refusal({"type": "python", "name": "p", "source": "def score(s, i): return 1"})
    assert param == "grader.source" and "grade(sample, item)" in message
    param, message = refusal({"type": "python", "name": "p", "source": "def grade(:"})
    assert param == "grader.source" and "does not parse" in message


def score_model(range_: list[float] | None = None) -> dict[str, Any]:
    grader: dict[str, Any] = {
        "type": "score_model", "name": "judge", "model": "judge-model",
        "input": [{"role": "developer", "content": "Grade 0 to 1."},
                  {"role": "user", "content": [{"type": "input_text",
                                                "text": "Q {{ item.q }} A {{ sample.output_text }}"}]}],
        "sampling_params": {"temperature": 0, "seed": 3, "max_completions_tokens": 16},
    }  # fmt: skip
    if range_ is not None:
        grader["range"] = range_
    return grader


class Judge:
    """A chat model that answers what it is told to: the seam a model grader is given."""

    def __init__(self, text: str, refusal: str | None = None) -> None:
        self.text, self.refusal = text, refusal
        self.calls: list[tuple[str, list[dict[str, str]], dict[str, Any]]] = []

    def __call__(
        self, model: str, messages: list[dict[str, str]], sampling: dict[str, Any]
    ) -> ChatReply:
        self.calls.append((model, messages, sampling))
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        return ChatReply(self.text, usage, self.refusal)


def test_score_model_asks_the_model_and_reads_its_score() -> None:
    judge = Judge('{"steps": [], "result": 0.7}')
    result = run_grader(parse_grader(score_model()), "4", {"q": "2+2"}, Grading(chat=judge))
    assert result.reward == pytest.approx(0.7) and result.failed_kinds == []
    model, messages, sampling = judge.calls[0]
    assert model == "judge-model"
    assert messages == [{"role": "system", "content": "Grade 0 to 1."},
                        {"role": "user", "content": "Q 2+2 A 4"}]  # fmt: skip
    assert sampling == {"max_completion_tokens": 16, "seed": 3, "temperature": 0, "top_p": None}
    assert result.usage_per_model == {"judge-model": {"prompt_tokens": 10, "completion_tokens": 2,
                                                      "total_tokens": 12}}  # fmt: skip
    plain = run_grader(
        parse_grader(score_model([1, 10])), "4", {"q": "x"}, Grading(chat=Judge(" 7 "))
    )
    assert plain.reward == 7.0


@pytest.mark.parametrize(
    ("reply", "refused", "kind"),
    [("seven", None, "model_grader_parse_error"), ("1.5", None, "model_grader_parse_error"),
     ("", "I can't grade this", "model_grader_refusal_error")],
)  # fmt: skip
def test_score_model_failures_score_zero(reply: str, refused: str | None, kind: str) -> None:
    grading = Grading(chat=Judge(reply, refused))
    result = run_grader(parse_grader(score_model()), "4", {"q": "x"}, grading)
    assert result.reward == 0.0 and result.failed_kinds == [kind]
    assert result.usage_per_model["judge-model"]["total_tokens"] == 12  # spent all the same


def test_a_chat_call_that_fails_is_a_server_error() -> None:
    def down(model: str, messages: list[dict[str, str]], sampling: dict[str, Any]) -> ChatReply:
        raise ConnectionError("no predict server")

    result = run_grader(parse_grader(score_model()), "4", {"q": "x"}, Grading(chat=down))
    assert result.failed_kinds == ["model_grader_server_error"]
    assert "no predict server" in result.details["model_grader_server_error_details"]


def test_label_model_inside_multi() -> None:
    label = {"type": "label_model", "name": "tone", "model": "judge-model",
             "input": [{"role": "user", "content": "Tone of {{ sample.output_text }}?"}],
             "labels": ["polite", "rude", "neutral"], "passing_labels": ["polite", "neutral"]}  # fmt: skip
    grader = parse_grader({"type": "multi", "name": "m", "calculate_output": "tone",
                           "graders": {"tone": label}})  # fmt: skip
    assert run_grader(grader, "thanks", None, Grading(chat=Judge("neutral"))).reward == 1.0
    assert run_grader(grader, "go", None, Grading(chat=Judge('{"result": "rude"}'))).reward == 0.0
    odd = run_grader(grader, "go", None, Grading(chat=Judge("angry")))
    assert odd.reward == 0.0 and odd.failed_kinds == ["model_grader_parse_error"]
    param, _ = refusal(
        {**grader.model_dump(), "graders": {"tone": {**label, "passing_labels": ["x"]}}}
    )
    assert param == "grader.graders.tone"
