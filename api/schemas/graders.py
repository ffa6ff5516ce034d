"""``/v1/fine_tuning/alpha/graders/run`` and ``/validate``: bodies as the ``openai`` SDK's
``GraderRunParams`` / ``GraderRunResponse`` / ``GraderValidateResponse`` define them. The grader
itself arrives as a plain object and is parsed by the service, so a bad field is named by its
path (``grader.graders.a.operation``) rather than by pydantic's union branches."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GraderValidateRequest(_Body):
    grader: dict[str, Any] = Field(
        description="A string_check, text_similarity, python, score_model or multi grader"
    )


class GraderRunRequest(GraderValidateRequest):
    model_sample: str = Field(
        max_length=1 << 20,
        description="The sample graded: sample.output_text, and sample.output_json when JSON",
    )
    item: Any = Field(default=None, description="The dataset row the templates read as item.*")


class GraderValidateResponse(BaseModel):
    grader: dict[str, Any] | None = None


class GraderRunErrors(BaseModel):
    """True for each kind of failure this run met (a failed grader scores 0)."""

    model_config = ConfigDict(protected_namespaces=())

    formula_parse_error: bool
    invalid_variable_error: bool
    model_grader_parse_error: bool
    model_grader_refusal_error: bool
    model_grader_server_error: bool
    model_grader_server_error_details: str | None = None
    other_error: bool
    python_grader_runtime_error: bool
    python_grader_runtime_error_details: str | None = None
    python_grader_server_error: bool
    python_grader_server_error_type: str | None = None
    sample_parse_error: bool
    truncated_observation_error: bool
    unresponsive_reward_error: bool


class GraderRunMetadata(BaseModel):
    errors: GraderRunErrors
    execution_time: float
    name: str
    sampled_model_name: str | None = None
    scores: dict[str, Any]
    token_usage: int | None = None
    type: str


class GraderRunResponse(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    metadata: GraderRunMetadata
    model_grader_token_usage_per_model: dict[str, Any]
    reward: float
    sub_rewards: dict[str, Any]
