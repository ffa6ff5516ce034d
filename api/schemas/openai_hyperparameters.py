"""The fine-tuning methods' hyperparameters, as the ``openai`` SDK's types define them
(``supervised_hyperparameters``, ``dpo_hyperparameters``, ``reinforcement_hyperparameters``):
each "auto" or a number, refused with its bound. What "auto" becomes is in docs/openai.md."""

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
ReasoningEffort = Literal["default", "low", "medium", "high"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Each hyperparameter's bound, in the words of its refusal (docs/openai.md states them too).
BOUNDS = {
    "n_epochs": "'auto' or an integer from 1 to 50",
    "batch_size": "'auto' or an integer from 1 to 256",
    "learning_rate_multiplier": "'auto' or a number above 0 and at most 10",
    "beta": "'auto' or a number above 0 and at most 10",
    "compute_multiplier": "'auto' or a number above 0 and at most 10",
    "eval_interval": "'auto' or an integer from 1 to 10000",
    "eval_samples": "'auto' or an integer from 1 to 1000",
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


class ReinforcementHyperparameters(Hyperparameters):
    """OpenAI's ``reinforcement_hyperparameters``: the supervised three (``batch_size`` counts
    prompts) and how much to sample and evaluate."""

    compute_multiplier: Auto | Annotated[float, Field(gt=0, le=10)] = Field(
        default="auto", description="Scales the completions sampled per prompt (group size 8)"
    )
    eval_interval: Auto | Annotated[int, Field(ge=1, le=10_000)] = Field(
        default="auto", description="Optimizer steps between evaluations"
    )
    eval_samples: Auto | Annotated[int, Field(ge=1, le=1000)] = Field(
        default="auto", description="Validation prompts sampled and graded at each evaluation"
    )
    reasoning_effort: ReasoningEffort = Field(
        default="default",
        description="Recorded; no model served here has a reasoning mode it would set",
    )

    _sampling_bound = field_validator(
        "compute_multiplier", "eval_interval", "eval_samples", mode="wrap"
    )(_bounded)


class ResolvedHyperparameters(BaseModel):
    n_epochs: int
    batch_size: int
    learning_rate_multiplier: float
