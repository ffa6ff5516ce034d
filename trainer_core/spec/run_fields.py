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
    report_to: list[Literal["tensorboard"]] = Field(
        default_factory=list,
        max_length=1,
        description='["tensorboard"]: event files in the outputs\' tensorboard/ folder',
        examples=[["tensorboard"]],
    )

    @field_validator("eval_steps")
    @classmethod
    def _eval_steps_need_strategy(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("eval_strategy") != "steps":
            raise ValueError('eval_steps needs eval_strategy "steps"')
        return value
