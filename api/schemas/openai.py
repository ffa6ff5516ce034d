"""The fine-tuning API's bodies and objects, as the ``openai`` SDK's types define them (its
``fine_tuning.job``, ``fine_tuning.job.event``, ``fine_tuning.job.checkpoint`` and ``model``).
What each field does here is in docs/openai.md."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

Auto = Literal["auto"]
MAX_METADATA = 16


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Each hyperparameter's bound, in the words of its refusal (docs/openai.md states them too).
BOUNDS = {
    "n_epochs": "'auto' or an integer from 1 to 50",
    "batch_size": "'auto' or an integer from 1 to 256",
    "learning_rate_multiplier": "'auto' or a number above 0 and at most 10",
    "beta": "'auto' or a number above 0 and at most 10",
}


def _bounded(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    """One refusal naming the field and its bound, not one per branch of the union
    ("Input should be 'auto'" at ``batch_size.literal['auto']``)."""
    try:
        return handler(value)
    except ValidationError:
        name = str(info.field_name)
        got = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
        raise ValueError(f"{name} must be {BOUNDS[name]} (got {got})") from None


class Hyperparameters(Strict):
    n_epochs: Auto | Annotated[int, Field(ge=1, le=50)] = "auto"
    batch_size: Auto | Annotated[int, Field(ge=1, le=256)] = "auto"
    learning_rate_multiplier: Auto | Annotated[float, Field(gt=0, le=10)] = "auto"

    _bound = field_validator("n_epochs", "batch_size", "learning_rate_multiplier", mode="wrap")(
        _bounded
    )


class DpoHyperparameters(Hyperparameters):
    """OpenAI's ``dpo_hyperparameters``: the supervised three (counted in pairs) and ``beta``."""

    beta: Auto | Annotated[float, Field(gt=0, le=10)] = "auto"

    _beta_bound = field_validator("beta", mode="wrap")(_bounded)


class Supervised(Strict):
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)


class Dpo(Strict):
    hyperparameters: DpoHyperparameters = Field(default_factory=DpoHyperparameters)


TRAINED_METHODS = ("supervised", "dpo")


class Method(Strict):
    # OpenAI's three names are known (a clear refusal names the ones gradacc trains); the schema
    # states the ones accepted.
    type: Literal["supervised", "dpo", "reinforcement"] = Field(
        json_schema_extra={"enum": list(TRAINED_METHODS)}
    )
    supervised: Supervised | None = None
    dpo: Dpo | None = None
    reinforcement: dict[str, Any] | None = None

    @field_validator("type")
    @classmethod
    def _trained_here(cls, value: str) -> str:
        if value not in TRAINED_METHODS:
            raise ValueError(
                f"method {value!r} is not trained by gradacc yet; use 'supervised' (chat or "
                "prompt-completion data) or 'dpo' (preference pairs), each with exact gradient "
                "accumulation"
            )
        return value

    @field_validator("supervised", "dpo")
    @classmethod
    def _of_the_type(cls, value: Any, info: ValidationInfo) -> Any:
        """Only the section of the chosen type: another's hyperparameters would be ignored."""
        chosen = info.data.get("type")
        if value is not None and chosen is not None and chosen != info.field_name:
            raise ValueError(f"given, but method.type is {chosen!r}")
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
        if self.method is not None and self.method.supervised is not None:
            return self.method.supervised.hyperparameters
        return self.hyperparameters or Hyperparameters()


class ResolvedHyperparameters(BaseModel):
    n_epochs: int
    batch_size: int
    learning_rate_multiplier: float


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
        "upstream server answers (GRADACC_SERVE_UPSTREAMS), else the tenant"
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelObject]


class ModelDeleted(BaseModel):
    object: Literal["model"] = "model"
    id: str
    deleted: bool = True
