"""What a job's grader may call, checked at POST: a model grader's ``model`` must be one the
training child can reach. The child calls an upstream server (``GRADACC_SERVE_UPSTREAMS``)
directly; this server's own models (``builtin:…``, ``ft:…``) answer on a worker's predict
server through the API, which a training process has no way to call, so a model grader that
names one is a 400 naming the field, before any job is made."""

from __future__ import annotations

from collections.abc import Iterator

from gradacc.errors import InvalidRequest
from gradacc.settings import Settings
from gradacc.sources.files import is_file_id
from trainer_core.spec.graders import Grader, LabelModelGrader, MultiGrader, ScoreModelGrader
from trainer_core.spec.job import JobSpec


def model_graders(
    grader: Grader, where: str = "grpo.grader"
) -> Iterator[tuple[str, ScoreModelGrader | LabelModelGrader]]:
    """(field path, grader) for each model grader, a multi's included."""
    if isinstance(grader, MultiGrader):
        for name, sub in grader.graders.items():
            if isinstance(sub, ScoreModelGrader | LabelModelGrader):
                yield f"{where}.graders.{name}", sub
    elif isinstance(grader, ScoreModelGrader):
        yield where, grader


def check_job_grader(spec: JobSpec, settings: Settings) -> None:
    """400 naming ``grpo.grader[.graders.NAME].model`` for a model no upstream serves, and
    ``grpo.eval_interval`` for an evaluation without validation prompts (an uploaded file is one
    split: its validation prompts are an ``eval_dataset``)."""
    if spec.grpo is None:
        return
    if spec.grpo.eval_interval and spec.eval_dataset is None and is_file_id(spec.dataset):
        raise InvalidRequest(
            "evaluating needs validation prompts: give eval_dataset (an uploaded file has no "
            "validation split)",
            param="grpo.eval_interval",
        )
    for where, grader in model_graders(spec.grpo.grader):
        route = settings.serve_upstreams.match(grader.model)
        if route is None or route.own_names(grader.model):
            raise InvalidRequest(
                f"{grader.model!r}: a training job's model grader calls an upstream server "
                "(GRADACC_SERVE_UPSTREAMS) and none serves this name; this server's own models "
                "cannot grade inside a training job yet",
                param=f"{where}.model",
            )
