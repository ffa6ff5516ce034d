"""The job spec's run fields: checkpoints, step records, evaluation, reporting. Part of
``JobSpec``."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
)

from trainer_core.spec.fields import PositiveInt, SaveStrategy
from trainer_core.spec.spec_base import SpecBase

# Every metric an evaluation gives, and the tasks that give it.
EVAL_METRICS = {
    "eval_loss": ("sequence-classification", "causal-lm"),
    "eval_accuracy": ("sequence-classification",),
    "eval_f1": ("sequence-classification",),
    "eval_perplexity": ("causal-lm",),
    "eval_mean_token_accuracy": ("causal-lm",),
}
# Lower is better, though the name does not end in "loss": the spec must say greater_is_better.
LOWER_IS_BETTER = ("eval_perplexity",)


def selection_greater_is_better(metric: str, given: bool | None) -> bool:
    """The Trainer's rule: greater is better unless the metric's name ends in "loss"."""
    if given is not None:
        return given
    return not metric.endswith("loss")


class RunFields(SpecBase):
    # Checkpoint policy, as in TrainingArguments; preemption and the end of training always save.
    save_strategy: SaveStrategy = Field(
        default="epoch",
        description="epoch: every epoch's end; steps: every save_steps; no",
        examples=["epoch"],
    )
    save_steps: int = Field(
        default=500, ge=1, le=10_000_000, description="With save_strategy 'steps'", examples=[500]
    )
    save_interval_seconds: float = Field(
        default=600.0,
        ge=0,
        le=7 * 24 * 3600,
        description="Also save at the first window boundary this long after the last save "
        "(not with save_strategy 'no'); 0 disables",
        examples=[600],
    )
    save_total_limit: int = Field(
        default=1, ge=1, le=100, description="Checkpoints kept", examples=[1]
    )
    logging_steps: PositiveInt | None = Field(
        default=None,
        le=10_000_000,
        description="Record step metrics every this many optimizer steps; default: about 50 "
        "points per epoch",
        examples=[10],
    )
    eval_strategy: Literal["epoch", "steps"] = Field(
        default="epoch",
        description='"steps": also evaluate every eval_steps optimizer steps',
        examples=["epoch"],
    )
    eval_steps: PositiveInt | None = Field(
        default=None,
        le=10_000_000,
        description='With eval_strategy "steps"; default: logging_steps',
        examples=[100],
    )
    # Model selection and early stopping: TrainingArguments' and EarlyStoppingCallback's names.
    load_best_model_at_end: bool = Field(
        default=False,
        description="The final model/ is the best evaluated checkpoint's weights (by "
        "metric_for_best_model); every evaluation then saves a checkpoint, so save_strategy "
        "must equal eval_strategy (with 'steps', save_steps a multiple of eval_steps)",
        examples=[True],
    )
    greater_is_better: bool | None = Field(
        default=None,
        description="Default: false when the metric's name ends in 'loss', else true (the "
        "Trainer's rule); eval_perplexity must say it (the rule would keep the worst model)",
        examples=[False],
    )
    metric_for_best_model: str | None = Field(
        default=None,
        max_length=64,
        description="The eval metric that ranks checkpoints and stops early: eval_loss "
        "(default), eval_accuracy, eval_f1 (classification), eval_perplexity, "
        "eval_mean_token_accuracy (causal-lm); the 'eval_' prefix may be left out",
        examples=["eval_loss"],
    )
    early_stopping_patience: PositiveInt | None = Field(
        default=None,
        le=10_000,
        description="Stop after this many evaluations in a row without an improvement of "
        "more than early_stopping_threshold over the best (EarlyStoppingCallback)",
        examples=[3],
    )
    early_stopping_threshold: float = Field(
        default=0.0,
        ge=0,
        le=1e9,
        description="How much better than the best an evaluation must be to count as an "
        "improvement (with early_stopping_patience)",
        examples=[0.0],
    )
    eval_sample_count: int = Field(
        default=4,
        ge=0,
        le=32,
        description="At each evaluation: a causal LM continues this many eval prompts "
        "greedily; classification keeps this many misclassified rows (0: none)",
        examples=[4],
    )
    eval_sample_max_new_tokens: int = Field(
        default=64, ge=1, le=512, description="New tokens per generated sample", examples=[64]
    )
    report_to: list[Literal["tensorboard"]] = Field(
        default_factory=list,
        max_length=1,
        description='["tensorboard"]: event files in the outputs\' tensorboard/ folder',
        examples=[["tensorboard"]],
    )

    @field_validator("load_best_model_at_end")
    @classmethod
    def _saving_follows_evaluation(cls, value: bool, info: ValidationInfo) -> bool:
        """As the Trainer requires: every evaluation can save the checkpoint it may pick."""
        data = info.data
        if not value or "save_strategy" not in data or "eval_strategy" not in data:
            return value
        save, evaluate = data["save_strategy"], data["eval_strategy"]
        if save != evaluate:
            raise ValueError(
                f"needs save_strategy equal to eval_strategy ({evaluate!r}), not {save!r}: "
                "every evaluation saves the checkpoint it may pick"
            )
        every = data.get("eval_steps") or data.get("logging_steps")
        if evaluate == "steps" and every is not None and data.get("save_steps", 1) % every:
            raise ValueError(
                f"needs save_steps ({data.get('save_steps')}) to be a round multiple of "
                f"eval_steps ({every})"
            )
        return value

    @field_validator("metric_for_best_model")
    @classmethod
    def _known_metric(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        name = value if value.startswith("eval_") else f"eval_{value}"
        if name not in EVAL_METRICS:
            raise ValueError(f"unknown metric {value!r}; one of {', '.join(EVAL_METRICS)}")
        task = info.data.get("task")
        if task is not None and task not in EVAL_METRICS[name]:
            raise ValueError(f"{task} gives no {name}")
        if name in LOWER_IS_BETTER and info.data.get("greater_is_better") is None:
            raise ValueError(
                f"{name} needs greater_is_better (false, surely): the Trainer's rule, true for "
                "any name not ending in 'loss', would keep the worst model"
            )
        return name

    @property
    def selection_metric(self) -> str:
        return self.metric_for_best_model or "eval_loss"

    @property
    def selection_greater_is_better(self) -> bool:
        return selection_greater_is_better(self.selection_metric, self.greater_is_better)

    @field_validator("eval_steps")
    @classmethod
    def _eval_steps_need_strategy(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("eval_strategy") != "steps":
            raise ValueError('eval_steps needs eval_strategy "steps"')
        return value
