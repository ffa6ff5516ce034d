"""What a job's grader names, checked at POST: its model graders (walked here, checked against
the tenant by ``gradacc.serving.grader_models``, as ``graders/validate`` and ``graders/run``
check them) and the validation prompts an evaluation needs."""

from __future__ import annotations

from collections.abc import Iterator

from gradacc.errors import InvalidRequest
from gradacc.sources.files import is_file_id
from trainer_core.spec.graders import Grader, LabelModelGrader, MultiGrader, ScoreModelGrader
from trainer_core.spec.job import JobSpec


def model_graders(
    grader: Grader | LabelModelGrader, where: str = "grpo.grader"
) -> Iterator[tuple[str, ScoreModelGrader | LabelModelGrader]]:
    """(field path, grader) for each model grader, a multi's included (a ``label_model`` stands
    alone only as an eval's criterion)."""
    if isinstance(grader, MultiGrader):
        for name, sub in grader.graders.items():
            if isinstance(sub, ScoreModelGrader | LabelModelGrader):
                yield f"{where}.graders.{name}", sub
    elif isinstance(grader, ScoreModelGrader | LabelModelGrader):
        yield where, grader


def check_job_grader(spec: JobSpec) -> None:
    """400 naming ``grpo.eval_interval`` for an evaluation without validation prompts (an
    uploaded file is one split: its validation prompts are an ``eval_dataset``)."""
    if spec.grpo is None:
        return
    if spec.grpo.eval_interval and spec.eval_dataset is None and is_file_id(spec.dataset):
        raise InvalidRequest(
            "evaluating needs validation prompts: give eval_dataset (an uploaded file has no "
            "validation split)",
            param="grpo.eval_interval",
        )
