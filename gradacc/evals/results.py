"""A run's counts from the items kept so far: OpenAI's ``result_counts`` (``total``: the run's
items, so ``passed + failed + errored`` of ``total`` is its progress),
``per_testing_criteria_results`` and ``per_model_usage``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def summary(
    total: int, kept: Iterable[tuple[str, dict[str, Any]]], names: list[str]
) -> dict[str, Any]:
    counts = {"total": total, "passed": 0, "failed": 0, "errored": 0}
    per = {name: {"passed": 0, "failed": 0} for name in names}
    usage: dict[str, dict[str, int]] = {}
    for status, record in kept:
        counts[{"pass": "passed", "fail": "failed"}.get(status, "errored")] += 1
        for result in record.get("results", []):
            if result["name"] in per:
                per[result["name"]]["passed" if result["passed"] else "failed"] += 1
        for model, spent in (record.get("usage") or {}).items():
            kept_usage = usage.setdefault(model, {})
            for key, tokens in spent.items():
                kept_usage[key] = kept_usage.get(key, 0) + tokens
    models = [
        {
            "model_name": model,
            "invocation_count": spent.get("invocation_count", 0),
            "prompt_tokens": spent.get("prompt_tokens", 0),
            "completion_tokens": spent.get("completion_tokens", 0),
            "total_tokens": spent.get("total_tokens", 0),
            "cached_tokens": 0,
        }
        for model, spent in sorted(usage.items())
    ]
    return {
        "result_counts": counts,
        "per_testing_criteria_results": [{"testing_criteria": n, **c} for n, c in per.items()],
        "per_model_usage": models,
    }
