"""The models a tenant's model graders (``score_model``, ``label_model``) may ask: one check that a
training job's POST, ``graders/validate`` and ``graders/run`` share, so each says what a job
would do.

A grader's model is asked as the tenant's own chat request would be (``gradacc.serving.ask``):
an alias followed, then an upstream route (``GRADACC_SERVE_UPSTREAMS``) or this server's own
model on a worker's predict server (a built-in, the tenant's ``ft:`` models and checkpoints,
their uploaded models, a cached hub model). A name that answers for no one, or answers only for
another tenant, is a 400 naming the grader's ``model`` field: never a grader that scores 0 on
every sample.

Example:
    >>> check_grader_models(session, settings, grader, tenant="alice", where="grader")  # doctest: +SKIP
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from gradacc.errors import DomainError, InvalidRequest, ModelNotFound
from gradacc.serving.ask import target
from gradacc.settings import Settings
from gradacc.sources.graders import model_graders
from trainer_core.spec.graders import Grader, LabelModelGrader, ScoreModelGrader

WHO_ANSWERS = (
    "a model grader asks a built-in model, one of your fine-tuned models or checkpoints, or a "
    "model a GRADACC_SERVE_UPSTREAMS route serves"
)


def check_grader_models(
    session: Session, settings: Settings, grader: Grader, *, tenant: str, where: str
) -> None:
    """``InvalidRequest`` naming ``{where}[.graders.NAME].model`` for the first model grader whose
    model does not answer for ``tenant`` (``…sampling_params.max_completions_tokens`` for one
    that asks this server's model for more than it answers); ``where`` is the grader's own path
    (``grader``, ``grpo.grader``)."""
    for path, judge in model_graders(grader, where):
        try:
            answering = target(session, settings, model=judge.model, tenant=tenant)
        except DomainError as problem:
            raise InvalidRequest(_why(judge.model, problem), param=f"{path}.model") from None
        if settings.serve_upstreams.match(answering) is None:  # ours: our predict servers' limit
            _check_length(judge, settings, path)


def _check_length(
    judge: ScoreModelGrader | LabelModelGrader, settings: Settings, path: str
) -> None:
    """A predict server refuses a longer answer than ``GRADACC_SERVE_MAX_COMPLETION_TOKENS``,
    every time: said here, not as a server error on every sample."""
    params = judge.sampling_params if isinstance(judge, ScoreModelGrader) else None
    asked = params.max_completions_tokens if params is not None else None
    limit = settings.serve_max_completion_tokens
    if asked is not None and asked > limit:
        raise InvalidRequest(
            f"at most {limit} for this server's models (GRADACC_SERVE_MAX_COMPLETION_TOKENS)",
            param=f"{path}.sampling_params.max_completions_tokens",
        )


def _why(model: str, problem: DomainError) -> str:
    if isinstance(problem, ModelNotFound):
        return f"{problem.message}; {WHO_ANSWERS}"
    said = problem.message.removeprefix(f"{problem.param}: ") if problem.param else problem.message
    return f"{model!r} cannot grade: {said}"
