"""The ``lora`` part of the job spec: low-rank adapters trained with the peft library. Cheap to
import (no peft, no torch): the API validates specs with it."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

_MODULE = re.compile(r"^[\w.-]{1,128}$")


class LoraSpec(BaseModel):
    """Low-rank adapters (the ``peft`` library): only they (and a new classification head) train."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    r: int = Field(default=8, ge=1, le=1024, description="Rank of the adapters")
    alpha: int = Field(default=16, ge=1, le=1_000_000, description="Scaling: alpha / r")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="Dropout on the adapters' input")
    target_modules: tuple[str, ...] | None = Field(
        default=None,
        max_length=64,
        description="Module names to adapt; default: peft's choice for the model type",
        examples=[["query", "value"]],
    )

    @field_validator("target_modules")
    @classmethod
    def _module_names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not all(_MODULE.fullmatch(name) for name in value):
            raise ValueError("module names are 1-128 letters, digits, '_', '-' or '.'")
        return value
