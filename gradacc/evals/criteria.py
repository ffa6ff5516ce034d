"""An eval's testing criteria: the graders ``graders/run`` takes (``label_model`` too, on its own,
as OpenAI's evals allow), each with the ``pass_threshold`` OpenAI's criteria carry.

An item passes a criterion when: ``string_check`` scores 1; ``label_model`` gives a passing
label; ``text_similarity`` reaches its ``pass_threshold`` (required, as OpenAI requires it);
``python``, ``score_model`` and ``multi`` reach their ``pass_threshold`` when one is given, and
otherwise score the top of their range (1, or a score_model's ``range[1]``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from gradacc.errors import InvalidRequest
from trainer_core.spec.graders import (
    Grader,
    LabelModelGrader,
    MultiGrader,
    PythonGrader,
    ScoreModelGrader,
    StringCheckGrader,
    TextSimilarityGrader,
    error_param,
)

MAX_CRITERIA = 16
Criterion = Annotated[
    StringCheckGrader
    | TextSimilarityGrader
    | PythonGrader
    | ScoreModelGrader
    | LabelModelGrader
    | MultiGrader,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Criterion] = TypeAdapter(Criterion)
THRESHOLD_TYPES = ("python", "score_model", "multi")  # carry pass_threshold beside the grader


@dataclass(frozen=True)
class TestingCriterion:
    grader: Grader | LabelModelGrader
    pass_threshold: float | None

    @property
    def name(self) -> str:
        return self.grader.name

    def passed(self, score: float) -> bool:
        if isinstance(self.grader, StringCheckGrader | LabelModelGrader):
            return score == 1.0
        if isinstance(self.grader, TextSimilarityGrader):
            return score >= (self.grader.pass_threshold or 0.0)
        if self.pass_threshold is not None:
            return score >= self.pass_threshold
        top = self.grader.bounds[1] if isinstance(self.grader, ScoreModelGrader) else 1.0
        return score >= top


def parse_criteria(raw: Any) -> list[TestingCriterion]:
    """The criteria, or a 400 naming the field at fault (``testing_criteria[2].operation``)."""
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_CRITERIA:
        raise InvalidRequest(f"a list of 1 to {MAX_CRITERIA} graders", param="testing_criteria")
    found: list[TestingCriterion] = []
    for i, value in enumerate(raw):
        found.append(_one(value, f"testing_criteria[{i}]"))
    names = [c.name for c in found]
    for i, name in enumerate(names):
        if names.index(name) != i:
            raise InvalidRequest(
                f"two criteria are named {name!r}: results are reported by name",
                param=f"testing_criteria[{i}].name",
            )
    return found


def _one(value: Any, where: str) -> TestingCriterion:
    if not isinstance(value, dict):
        raise InvalidRequest("a grader object", param=where)
    grader = dict(value)
    threshold = (
        grader.pop("pass_threshold", None) if grader.get("type") in THRESHOLD_TYPES else None
    )
    if grader.get("type") == "text_similarity" and grader.get("pass_threshold") is None:
        raise InvalidRequest(
            "a text_similarity criterion needs pass_threshold", param=f"{where}.pass_threshold"
        )
    if threshold is not None and not isinstance(threshold, int | float):
        raise InvalidRequest("a number", param=f"{where}.pass_threshold")
    try:
        parsed = _ADAPTER.validate_python(grader)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidRequest(message, param=error_param(first["loc"], where)) from None
    return TestingCriterion(parsed, None if threshold is None else float(threshold))


def as_sent(criterion: TestingCriterion) -> dict[str, Any]:
    """The criterion as OpenAI answers it."""
    found = criterion.grader.model_dump(mode="json", exclude_none=True)
    if criterion.pass_threshold is not None:
        found["pass_threshold"] = criterion.pass_threshold
    return found
