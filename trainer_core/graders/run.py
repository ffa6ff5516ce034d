"""One grader on one sample: the reward, each sub-grader's, and the errors counted by kind, as
OpenAI's ``graders/run`` reports them. A grader that fails scores 0 and the run goes on: that is
what a training step needs, and what OpenAI does."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from trainer_core.graders import model_graders
from trainer_core.graders.errors import ERROR_KINDS, GraderFailed
from trainer_core.graders.formula import evaluate
from trainer_core.graders.model_graders import ChatFn, ChatReply
from trainer_core.graders.sandbox import SandboxLimits, run_python
from trainer_core.graders.templates import render, sample_namespace
from trainer_core.graders.text import string_check, text_similarity
from trainer_core.spec.graders import (
    Grader,
    LabelModelGrader,
    MultiGrader,
    PythonGrader,
    ScoreModelGrader,
    StringCheckGrader,
    SubGrader,
    TextSimilarityGrader,
)

# The details OpenAI reports beside three of the kinds.
DETAIL_FIELDS = {
    "python_grader_runtime_error": "python_grader_runtime_error_details",
    "python_grader_server_error": "python_grader_server_error_type",
    "model_grader_server_error": "model_grader_server_error_details",
}


@dataclass
class GraderResult:
    reward: float
    name: str
    type: str
    sub_rewards: dict[str, float] = field(default_factory=dict)
    errors: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(ERROR_KINDS, False))
    details: dict[str, str] = field(default_factory=dict)
    usage_per_model: dict[str, dict[str, int]] = field(default_factory=dict)
    execution_time: float = 0.0

    def count(self, failure: GraderFailed) -> None:
        self.errors[failure.kind] = True
        if failure.kind in DETAIL_FIELDS:
            self.details.setdefault(DETAIL_FIELDS[failure.kind], failure.detail)

    def add_usage(self, model: str, reply: ChatReply) -> None:
        kept = self.usage_per_model.setdefault(model, {})
        for key, tokens in reply.usage.items():
            kept[key] = kept.get(key, 0) + tokens

    @property
    def failed_kinds(self) -> list[str]:
        return [kind for kind, hit in self.errors.items() if hit]


@dataclass(frozen=True)
class Grading:
    """What a grader may call on: the chat model for model graders and the sandbox's limits;
    for one request, a total ``deadline`` (``time.monotonic()``: a sub-grader not started by
    then is ``unresponsive_reward_error``) and a ``cancel`` that ends the grading (the asker
    went away: the running sandbox is killed and nothing more starts)."""

    chat: ChatFn | None = None
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    deadline: float | None = None
    cancel: threading.Event | None = None

    def stop_reason(self) -> str | None:
        if self.cancel is not None and self.cancel.is_set():
            return "cancelled: the request went away"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "the grading's deadline passed (GRADACC_GRADER_RUN_DEADLINE_S)"
        return None


def run_grader(
    grader: Grader | LabelModelGrader,
    model_sample: str,
    item: Any,
    grading: Grading | None = None,
) -> GraderResult:
    """Example: ``run_grader(parse_grader({...}), "4", {"answer": "4"}).reward``."""
    grading = grading or Grading()
    started = time.perf_counter()
    result = GraderResult(reward=0.0, name=grader.name, type=grader.type)
    namespaces = {"sample": sample_namespace(model_sample), "item": item}
    if isinstance(grader, MultiGrader):
        result.reward = _multi(grader, namespaces, grading, result)
    else:
        result.reward = _scored(grader, namespaces, grading, result)
    result.execution_time = time.perf_counter() - started
    return result


def _multi(
    grader: MultiGrader, namespaces: dict[str, Any], grading: Grading, result: GraderResult
) -> float:
    for name, sub in grader.graders.items():
        result.sub_rewards[name] = _scored(sub, namespaces, grading, result)
    try:
        return evaluate(grader.calculate_output, result.sub_rewards)
    except GraderFailed as failure:
        result.count(failure)
        return 0.0


def _scored(
    grader: SubGrader, namespaces: dict[str, Any], grading: Grading, result: GraderResult
) -> float:
    try:
        return _score(grader, namespaces, grading, result)
    except GraderFailed as failure:
        result.count(failure)
        return 0.0
    except Exception as exc:  # a library's own failure: counted, and the run goes on
        result.count(GraderFailed("other_error", f"{type(exc).__name__}: {exc}"))
        return 0.0


def _score(
    grader: SubGrader, namespaces: dict[str, Any], grading: Grading, result: GraderResult
) -> float:
    if reason := grading.stop_reason():
        raise GraderFailed("unresponsive_reward_error", reason)
    if isinstance(grader, StringCheckGrader):
        value, reference = render(grader.input, namespaces), render(grader.reference, namespaces)
        return string_check(grader.operation, value, reference)
    if isinstance(grader, TextSimilarityGrader):
        value, reference = render(grader.input, namespaces), render(grader.reference, namespaces)
        return text_similarity(grader.evaluation_metric, value, reference)
    if isinstance(grader, PythonGrader):
        return run_python(
            grader.source,
            namespaces["sample"],
            namespaces["item"],
            grading.limits,
            deadline=grading.deadline,
            cancel=grading.cancel,
        )
    if grading.chat is None:
        raise GraderFailed("model_grader_server_error", "no chat model is available here")
    if isinstance(grader, ScoreModelGrader):
        return model_graders.score_model(grader, namespaces, grading.chat, result.add_usage)
    assert isinstance(grader, LabelModelGrader)
    return model_graders.label_model(grader, namespaces, grading.chat, result.add_usage)
