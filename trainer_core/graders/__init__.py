"""OpenAI's graders, run: ``run_grader(grader, model_sample, item, Grading(chat=...))`` scores
one sample. The grader's definition and its checks live in ``trainer_core.spec.graders`` (one
definition for the job spec and the API); this package runs them and knows no web framework or
database, so the API's ``graders/run`` and a training run's rewards are the same code. A training
run gets it as a callable (the core imports only the spec), as it gets its chat model.

- ``run``: the dispatcher, ``multi`` and the result (OpenAI's error kinds, ``errors``).
- ``templates``: ``{{ sample.* }}`` / ``{{ item.* }}``. ``text``: string_check, text_similarity.
- ``sandbox``: the python grader's process. ``models``: score_model, label_model.
- ``formula``: ``calculate_output``, without eval.
"""

from __future__ import annotations

from trainer_core.graders.errors import ERROR_KINDS, GraderFailed
from trainer_core.graders.model_graders import ChatFn, ChatReply
from trainer_core.graders.run import GraderResult, Grading, run_grader
from trainer_core.graders.sandbox import SandboxLimits
from trainer_core.graders.templates import lookup, render

__all__ = [
    "ERROR_KINDS",
    "ChatFn",
    "ChatReply",
    "GraderFailed",
    "GraderResult",
    "Grading",
    "SandboxLimits",
    "lookup",
    "render",
    "run_grader",
]
