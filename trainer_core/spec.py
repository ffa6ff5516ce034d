"""The job spec: the one contract shared by the API, the worker and the training core.

Importing this module must stay cheap (no torch, no transformers): the API validates specs with it.
Field names follow ``transformers.TrainingArguments`` where one exists.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from trainer_core.sources import classify_source

BUILTIN_MODELS = ("builtin:tiny-bert", "builtin:tiny-gpt2")
# builtin dataset -> does it carry labels?
BUILTIN_DATASETS = {"builtin:sentiment": True, "builtin:tiny-stories": False}

Task = Literal["sequence-classification", "causal-lm"]
Backend = Literal["pytorch", "accelerate", "trainer"]
SchedulerType = Literal[
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup"
]

# A hub id: "name" or "owner/name", letters, digits, "-", "_", "." (no "..", no leading dot).
_HUB_ID = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?$")
_COLUMN = re.compile(r"^[\w .-]{1,128}$")

PositiveInt = Annotated[int, Field(ge=1)]


def _check_source(value: str, *, builtins: tuple[str, ...], what: str) -> str:
    """Accept a builtin name, a local path, or a hub id ("name" / "owner/name", optional ":config")."""
    value = value.strip()
    if not value:
        raise ValueError(f"{what} must not be empty")
    if "\x00" in value or any(ord(ch) < 32 for ch in value):
        raise ValueError(f"{what} contains control characters")
    kind = classify_source(value)
    if kind == "builtin":
        if value not in builtins:
            raise ValueError(
                f"unknown builtin {what} {value!r}; choose one of {', '.join(builtins)}"
            )
        return value
    if kind == "local":
        return value
    hub_id = value.split(":", 1)[0] if what == "dataset" else value
    if not _HUB_ID.fullmatch(hub_id):
        raise ValueError(
            f"{what} {value!r} is neither a builtin, a local path, nor a hub id like 'owner/name'"
        )
    return value


class JobSpec(BaseModel):
    """What to train, on what, and how. Unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", str_max_length=1024, frozen=True)

    task: Task = "sequence-classification"
    backend: Backend = "pytorch"
    model: str = Field(
        description="builtin:tiny-bert, builtin:tiny-gpt2, a save_pretrained directory, or a hub id",
        examples=["builtin:tiny-bert"],
    )
    dataset: str = Field(
        description="builtin:sentiment, builtin:tiny-stories, a .csv/.jsonl/.parquet file, "
        "or a hub dataset id ('name' or 'name:config')",
        examples=["builtin:sentiment"],
    )
    eval_dataset: str | None = Field(
        default=None,
        description="Same forms as dataset; default: its validation split or a hold-out",
    )
    text_column: str = "text"
    label_column: str | None = Field(
        default=None, description="Classification only; defaults to 'label'"
    )
    gradient_accumulation_steps: int = Field(default=1, ge=1, le=4096)
    per_device_train_batch_size: int = Field(default=8, ge=1, le=65536)
    per_device_eval_batch_size: int = Field(default=32, ge=1, le=65536)
    num_train_epochs: int = Field(default=3, ge=1, le=10000)
    learning_rate: float = Field(default=5e-4, gt=0, le=10)
    weight_decay: float = Field(default=0.0, ge=0, le=10)
    warmup_steps: int = Field(default=0, ge=0, le=10_000_000)
    lr_scheduler_type: SchedulerType = "linear"
    max_grad_norm: float = Field(default=1.0, ge=0, le=1e6, description="0 disables clipping")
    seed: int = Field(default=42, ge=0, le=2**32 - 1)
    max_seq_length: int = Field(default=128, ge=2, le=32768)
    max_train_samples: PositiveInt | None = None
    max_eval_samples: PositiveInt | None = None
    validation_split_percentage: int = Field(default=10, ge=1, le=50)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    logging_steps: PositiveInt | None = Field(
        default=None,
        le=10_000_000,
        description="Record step metrics every this many optimizer steps; default: about 50 "
        "points per epoch",
    )
    eval_strategy: Literal["epoch", "steps"] = Field(
        default="epoch", description='"steps": also evaluate every eval_steps optimizer steps'
    )
    report_to: list[Literal["tensorboard"]] = Field(
        default_factory=list,
        max_length=1,
        description='["tensorboard"]: event files in the outputs\' tensorboard/ folder',
    )
    eval_steps: PositiveInt | None = Field(
        default=None,
        le=10_000_000,
        description='With eval_strategy "steps"; default: logging_steps',
    )

    @field_validator("model")
    @classmethod
    def _model_source(cls, value: str) -> str:
        return _check_source(value, builtins=BUILTIN_MODELS, what="model")

    @field_validator("dataset", "eval_dataset")
    @classmethod
    def _dataset_source(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        value = _check_source(value, builtins=tuple(BUILTIN_DATASETS), what="dataset")
        labelled = BUILTIN_DATASETS.get(value, True)
        if info.data.get("task") == "sequence-classification" and not labelled:
            raise ValueError(f"{value} has no labels; use it with task causal-lm")
        return value

    @field_validator("text_column", "label_column")
    @classmethod
    def _column_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not _COLUMN.fullmatch(value):
            raise ValueError("column names are 1-128 letters, digits, spaces, '_', '-' or '.'")
        if info.field_name == "label_column" and info.data.get("task") == "causal-lm":
            raise ValueError("a causal-lm task has no label column")
        return value

    @field_validator("eval_steps")
    @classmethod
    def _eval_steps_need_strategy(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("eval_strategy") != "steps":
            raise ValueError('eval_steps needs eval_strategy "steps"')
        return value

    @property
    def effective_batch_size(self) -> int:
        """Samples per optimizer step on one device: micro-batch x K (x world size, here 1)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    @property
    def resolved_label_column(self) -> str | None:
        if self.task == "causal-lm":
            return None
        return self.label_column or "label"


def example_spec() -> dict[str, object]:
    """A small job that runs in seconds on a CPU; used by docs and demos."""
    return {
        "model": "builtin:tiny-bert",
        "dataset": "builtin:sentiment",
        "task": "sequence-classification",
        "backend": "pytorch",
        "gradient_accumulation_steps": 4,
        "per_device_train_batch_size": 8,
        "num_train_epochs": 3,
        "learning_rate": 1e-3,
        "seed": 42,
    }
