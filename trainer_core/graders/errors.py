"""The error kinds a grader run counts, by OpenAI's names (``GraderRunResponse.metadata.errors``).

A grader that fails scores 0 and sets one of these; a training run goes on and counts them."""

from __future__ import annotations

ERROR_KINDS = (
    "formula_parse_error",
    "invalid_variable_error",
    "model_grader_parse_error",
    "model_grader_refusal_error",
    "model_grader_server_error",
    "other_error",
    "python_grader_runtime_error",
    "python_grader_server_error",
    "sample_parse_error",
    "truncated_observation_error",
    "unresponsive_reward_error",
)


class GraderFailed(Exception):
    """One grader could not score: its kind (one of ``ERROR_KINDS``) and what happened."""

    def __init__(self, kind: str, detail: str) -> None:
        assert kind in ERROR_KINDS, kind
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
