"""The fine-tuning API's bodies and objects, as the ``openai`` SDK's types define them (its
``fine_tuning.job``, ``fine_tuning.job.event``, ``fine_tuning.job.checkpoint`` and ``model``).
What each field does here is in docs/openai.md."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from api.schemas.openai_hyperparameters import (
    DpoHyperparameters,
    Hyperparameters,
    ReinforcementHyperparameters,
    ResolvedHyperparameters,
    Strict,
)

MAX_METADATA = 16


class Supervised(Strict):
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)


class Dpo(Strict):
    hyperparameters: DpoHyperparameters = Field(default_factory=DpoHyperparameters)


class Reinforcement(Strict):
    """OpenAI's ``reinforcement_method``. The grader arrives as a plain object and is parsed by
    the service, so a bad field is named by its path (``method.reinforcement.grader.graders.a.
    operation``) rather than by pydantic's union branches."""

    grader: dict[str, Any] = Field(
        description="A string_check, text_similarity, python, score_model or multi grader"
    )
    hyperparameters: ReinforcementHyperparameters = Field(
        default_factory=ReinforcementHyperparameters
    )


class Method(Strict):
    type: Literal["supervised", "dpo", "reinforcement"]
    supervised: Supervised | None = None
    dpo: Dpo | None = None
    reinforcement: Reinforcement | None = Field(default=None, validate_default=True)

    @field_validator("supervised", "dpo", "reinforcement")
    @classmethod
    def _of_the_type(cls, value: Any, info: ValidationInfo) -> Any:
        """Only the section of the chosen type: another's hyperparameters would be ignored. A
        reinforcement job needs its own: the grader is what it trains on."""
        chosen = info.data.get("type")
        if value is not None and chosen is not None and chosen != info.field_name:
            raise ValueError(f"given, but method.type is {chosen!r}")
        if value is None and chosen == "reinforcement" == info.field_name:
            raise ValueError(
                "method reinforcement needs reinforcement.grader: the grader that "
                "scores each sampled answer"
            )
        return value


class FineTuningJobCreate(Strict):
    """The body of POST /v1/fine_tuning/jobs (OpenAI's), plus ``gradacc``: our own spec fields."""

    model: str = Field(
        min_length=1,
        max_length=512,
        description="A base model (GET /v1/models), an uploaded model (file-…), a hub id, or a "
        "fine-tuned model (ft:…, or one of its checkpoints)",
        examples=["builtin:tiny-chat"],
    )
    training_file: str = Field(description="A file uploaded with purpose fine-tune")
    validation_file: str | None = Field(default=None, description="Also purpose fine-tune")
    suffix: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Up to 64 letters, digits, '-', '_' or '.': part of fine_tuned_model",
    )
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = Field(
        default=None, description="Up to 16 pairs; keys up to 64 characters"
    )
    method: Method | None = None
    hyperparameters: Hyperparameters | None = Field(
        default=None, description="OpenAI's older place for them (method.supervised's now)"
    )
    integrations: list[dict[str, Any]] | None = None
    gradacc: dict[str, Any] | None = Field(
        default=None,
        description="Any gradacc job spec field (backend, gradient_accumulation_steps, lora, "
        "mixed_precision, ...): the OpenAI SDK sends it as extra_body",
        examples=[{"backend": "pytorch", "gradient_accumulation_steps": 4}],
    )

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and len(value) > MAX_METADATA:
            raise ValueError(f"at most {MAX_METADATA} pairs (got {len(value)})")
        if value is not None and any(not 1 <= len(key) <= 64 for key in value):
            raise ValueError("keys are 1 to 64 characters")
        return value

    @field_validator("integrations")
    @classmethod
    def _integrations(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value:
            names = ", ".join(sorted({str(i.get("type", "?")) for i in value}))
            raise ValueError(f"no integrations are configured on this server (asked: {names})")
        return value

    @field_validator("hyperparameters")
    @classmethod
    def _of_supervised(
        cls, value: Hyperparameters | None, info: ValidationInfo
    ) -> Hyperparameters | None:
        method = info.data.get("method")
        if value is not None and method is not None and method.type != "supervised":
            raise ValueError(
                f"these are method supervised's; give method.{method.type}.hyperparameters"
            )
        return value

    @property
    def method_type(self) -> str:
        return "supervised" if self.method is None else self.method.type

    def chosen_hyperparameters(self) -> Hyperparameters:
        """The method's section, else the top-level one (OpenAI's older place), else all auto."""
        if self.method is not None and self.method.dpo is not None:
            return self.method.dpo.hyperparameters
        if self.method is not None and self.method.type == "dpo":
            return DpoHyperparameters()
        if self.method is not None and self.method.reinforcement is not None:
            return self.method.reinforcement.hyperparameters
        if self.method is not None and self.method.supervised is not None:
            return self.method.supervised.hyperparameters
        return self.hyperparameters or Hyperparameters()


class JobError(BaseModel):
    code: str
    message: str
    param: str | None = None


class FineTuningJob(BaseModel):
    object: Literal["fine_tuning.job"] = "fine_tuning.job"
    id: str = Field(description="The same job's id on /v1/jobs")
    created_at: int
    finished_at: int | None
    status: Literal[
        "validating_files", "queued", "running", "paused", "succeeded", "failed", "cancelled"
    ]
    model: str
    fine_tuned_model: str | None = Field(description="ft:<base>:<tenant>:<suffix>:<job id>")
    organization_id: str = Field(description="The tenant")
    training_file: str
    validation_file: str | None
    result_files: list[str]
    trained_tokens: int | None
    estimated_finish: int | None
    error: JobError | None
    hyperparameters: ResolvedHyperparameters
    method: dict[str, Any]
    seed: int
    metadata: dict[str, str] | None
    integrations: list[dict[str, Any]] = Field(default_factory=list)
    user_provided_suffix: str | None = None


class FineTuningJobList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FineTuningJob]
    has_more: bool


class FineTuningEvent(BaseModel):
    object: Literal["fine_tuning.job.event"] = "fine_tuning.job.event"
    id: str
    created_at: int
    level: Literal["info", "warn", "error"]
    message: str
    type: Literal["message", "metrics"]
    data: dict[str, Any] | None = None


class FineTuningEventList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FineTuningEvent]
    has_more: bool


class FineTuningCheckpoint(BaseModel):
    object: Literal["fine_tuning.job.checkpoint"] = "fine_tuning.job.checkpoint"
    id: str
    created_at: int
    fine_tuning_job_id: str
    fine_tuned_model_checkpoint: str = Field(description="Usable as model on both APIs")
    step_number: int
    metrics: dict[str, float | None]


class FineTuningCheckpointList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FineTuningCheckpoint]
    has_more: bool
    first_id: str | None
    last_id: str | None


class ModelObject(BaseModel):
    object: Literal["model"] = "model"
    id: str
    created: int
    owned_by: str = Field(
        description="gradacc for the built-in ones, upstream for a model an "
        "upstream server answers (GRADACC_SERVE_UPSTREAMS), alias for an alias, else the tenant"
    )
    alias_for: str | None = Field(
        default=None, description="An alias's model: requests naming this id are answered by it"
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelObject]


class ModelDeleted(BaseModel):
    object: Literal["model"] = "model"
    id: str
    deleted: bool = True
