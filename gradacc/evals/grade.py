"""One item of an eval run: its sample (asked of the run's model, or the one the item carries),
each testing criterion's grade, and the record kept (OpenAI's output item, with the tokens each
model spent). An item is ``pass`` when every criterion passes, ``error`` when its sample could
not be had or a grader failed (OpenAI's error kinds), ``fail`` otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gradacc.evals.criteria import TestingCriterion
from gradacc.evals.sources import RunPlan, messages_for
from gradacc.serving.ask import TRANSIENT, error_message
from trainer_core.graders import GraderFailed, Grading, run_grader

# ask(body) -> (status, JSON answer): a chat completion, wherever its model answers.
AskFn = Callable[[dict[str, Any]], tuple[int, Any]]
DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "seed": None, "max_completion_tokens": None}


def grade_item(
    plan: RunPlan,
    criteria: list[TestingCriterion],
    row: dict[str, Any],
    index: int,
    *,
    ask: AskFn,
    grading: Grading,
) -> tuple[str, dict[str, Any]] | None:
    """(status, record); None when no server could answer now (ask again later)."""
    item = row["item"]
    usage: dict[str, dict[str, int]] = {}
    if plan.kind == "jsonl":
        sample = _given_sample(row.get("sample"))
    else:
        sampled = _sampled(plan, item, ask, usage)
        if sampled is None:
            return None
        sample = sampled
    results: list[dict[str, Any]] = []
    if sample["error"] is None:
        text = str(sample["output"][0]["content"] or "") if sample["output"] else ""
        for criterion in criteria:
            results.append(_graded(criterion, text, item, grading, usage))
    record = {
        "datasource_item": item,
        "datasource_item_id": index,
        "sample": sample,
        "results": results,
        "usage": usage,
        "created_at": int(time.time()),
    }
    return _status(sample, results), record


def _status(sample: dict[str, Any], results: list[dict[str, Any]]) -> str:
    if sample["error"] is not None or any(r.get("errors") for r in results):
        return "error"
    return "pass" if all(r["passed"] for r in results) else "fail"


def _given_sample(given: Any) -> dict[str, Any]:
    text = given.get("output_text") if isinstance(given, dict) else None
    sample = _sample_skeleton([], None)
    if not isinstance(text, str):
        sample["error"] = {
            "code": "sample_missing",
            "message": "the item has no sample.output_text",
        }
        return sample
    sample["output"] = [{"role": "assistant", "content": text}]
    sample["finish_reason"] = "stop"
    return sample


def _sample_skeleton(messages: list[dict[str, str]], model: str | None) -> dict[str, Any]:
    return {
        "input": messages,
        "output": [],
        "finish_reason": "",
        "model": model or "",
        "usage": {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "cached_tokens": 0,
        },
        "error": None,
        **DEFAULTS,
    }


def _sampled(
    plan: RunPlan, item: Any, ask: AskFn, usage: dict[str, dict[str, int]]
) -> dict[str, Any] | None:
    assert plan.model is not None
    try:
        messages = messages_for(plan, item)
    except GraderFailed as failure:
        sample = _sample_skeleton([], plan.model)
        sample["error"] = {"code": failure.kind, "message": failure.detail}
        return sample
    sample = _sample_skeleton(messages, plan.model) | plan.sampling
    status, answer = ask({"model": plan.model, "messages": messages, **plan.sampling})
    if status in TRANSIENT:
        return None
    if status != 200:
        code = (answer.get("error") or {}).get("code") if isinstance(answer, dict) else None
        sample["error"] = {"code": code or str(status), "message": error_message(status, answer)}
        return sample
    choice = answer["choices"][0]
    sample["output"] = [{"role": "assistant", "content": choice["message"].get("content") or ""}]
    sample["finish_reason"] = choice.get("finish_reason") or ""
    spent = {k: v for k, v in (answer.get("usage") or {}).items() if isinstance(v, int)}
    sample["usage"] = sample["usage"] | spent
    _count(usage, plan.model, spent)
    return sample


def _graded(
    criterion: TestingCriterion,
    text: str,
    item: Any,
    grading: Grading,
    usage: dict[str, dict[str, int]],
) -> dict[str, Any]:
    result = run_grader(criterion.grader, text, item, grading)
    for model, spent in result.usage_per_model.items():
        _count(usage, model, spent)
    found: dict[str, Any] = {
        "name": criterion.name,
        "type": criterion.grader.type,
        "score": result.reward,
        "passed": not result.failed_kinds and criterion.passed(result.reward),
        "sample": None,
    }
    if result.failed_kinds:
        found["errors"] = {kind: True for kind in result.failed_kinds} | result.details
    return found


def _count(usage: dict[str, dict[str, int]], model: str, spent: dict[str, int]) -> None:
    kept = usage.setdefault(model, {"invocation_count": 0})
    kept["invocation_count"] += 1
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        kept[key] = kept.get(key, 0) + int(spent.get(key, 0))
