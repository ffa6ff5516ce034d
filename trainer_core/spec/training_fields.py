"""The job spec's training fields: schedule, optimizer, precision, memory, adapters. Part of
``JobSpec``."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
)

from trainer_core.spec.fields import MixedPrecision, Optimizer, PositiveInt, SchedulerType
from trainer_core.spec.lora import LoraSpec
from trainer_core.spec.spec_base import SpecBase


class TrainingFields(SpecBase):
    num_train_epochs: int = Field(
        default=3, ge=1, le=10000, description="Passes over the training data", examples=[3]
    )
    learning_rate: float = Field(
        default=5e-4, gt=0, le=10, description="Peak learning rate (AdamW)", examples=[1e-3]
    )
    weight_decay: float = Field(
        default=0.0, ge=0, le=10, description="AdamW decoupled weight decay", examples=[0.01]
    )
    warmup_steps: int = Field(
        default=0,
        ge=0,
        le=10_000_000,
        description="Optimizer steps of linear warm-up before the schedule",
        examples=[0],
    )
    lr_scheduler_type: SchedulerType = Field(
        default="linear", description="The schedule after warm-up", examples=["linear"]
    )
    max_grad_norm: float = Field(
        default=1.0,
        ge=0,
        le=1e6,
        description="Clip the gradient norm; 0 disables clipping",
        examples=[1.0],
    )
    seed: int = Field(
        default=42,
        ge=0,
        le=2**32 - 1,
        description="Seeds weights, shuffling and dropout",
        examples=[42],
    )
    max_seq_length: int = Field(
        default=128,
        ge=2,
        le=32768,
        description="Tokens per sample, at most the model's context (longer is cut, or refused "
        "with overlong_rows 'refuse'); /v1/fine_tuning/jobs: the model's context by default",
        examples=[128],
    )
    overlong_rows: Literal["truncate", "refuse"] = Field(
        default="truncate",
        description="A chat or prompt-completion row longer than max_seq_length: cut (a warning "
        "event counts what was cut) or refused, naming its row ('refuse': "
        "/v1/fine_tuning/jobs' default, as OpenAI)",
        examples=["truncate"],
    )
    max_train_samples: PositiveInt | None = Field(
        default=None, description="Train on the first N samples only", examples=[64]
    )
    max_eval_samples: PositiveInt | None = Field(
        default=None, description="Evaluate on the first N samples only", examples=[32]
    )
    validation_split_percentage: int = Field(
        default=10,
        ge=0,
        le=50,
        description="Hold-out share of the training data when there is no eval dataset (an "
        "event says so); 0: none, every row trains and nothing is evaluated "
        "(/v1/fine_tuning/jobs without a validation_file, as OpenAI)",
        examples=[10],
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="auto: CUDA when present, else the CPU", examples=["auto"]
    )
    max_memory_fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Memory budget of the 'auto' micro-batch: a fraction of the device's memory "
        "(default 0.9)",
        examples=[0.8],
    )
    max_memory_bytes: int | None = Field(
        default=None,
        ge=1,
        description="Memory budget of the 'auto' micro-batch, in bytes",
        examples=[8_000_000_000],
    )
    mixed_precision: MixedPrecision = Field(
        default="no",
        description="bf16 (CPU or GPU) or fp16 (GPU only, with a gradient scaler)",
        examples=["bf16"],
    )
    gradient_checkpointing: bool = Field(
        default=False,
        description="Recompute activations in the backward pass: less memory, more time",
        examples=[True],
    )
    group_by_length: bool | None = Field(
        default=None,
        description="Order each optimizer window's rows longest first before cutting it into "
        "micro-batches: less padding, the same updates (a window's gradient does not depend on "
        "how its rows are split). Only within a window, unlike the Trainer's option. Default: "
        "on for causal-lm (rows of mixed lengths), off for classification",
        examples=[True],
    )

    loss_chunk_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1 << 20,
        description="A causal LM's head applied this many tokens at a time, recomputed in the "
        "backward: the [tokens x vocabulary] logits are never held whole (the same loss; for "
        "large vocabularies and long rows). Unset: whole logits",
        examples=[1024],
    )

    packing: bool = Field(
        default=False,
        description="Lay each micro-batch's rows end to end in one padding-free row: position "
        "ids restart per row, attention stays inside each row, each row's first label is "
        "masked; rows never leave their window, so the updates are those of the padded run "
        "(causal-lm, method sft; a model whose attention cannot isolate rows is refused)",
        examples=[True],
    )

    @field_validator("packing")
    @classmethod
    def _packing_fits_task(cls, value: bool, info: ValidationInfo) -> bool:
        """Packing lays out token rows of one sequence each: a classifier's rows and DPO's
        pairs keep their padded layout."""
        if value and info.data.get("task", "causal-lm") != "causal-lm":
            raise ValueError("packing needs task causal-lm (a classifier's rows are not packed)")
        if value and info.data.get("method", "sft") != "sft":
            raise ValueError(
                "packing needs method sft (DPO's pairs and GRPO's rollouts are not packed)"
            )
        return value

    @field_validator("loss_chunk_tokens")
    @classmethod
    def _chunks_of_tokens(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("task", "causal-lm") != "causal-lm":
            raise ValueError(
                "loss_chunk_tokens needs task causal-lm (a classifier has no vocabulary-wide head)"
            )
        return value

    @property
    def groups_by_length(self) -> bool:
        if self.group_by_length is not None:
            return self.group_by_length
        return getattr(self, "task", None) == "causal-lm"

    optim: Optimizer = Field(
        default="adamw_torch",
        description="adamw_torch, adamw_torch_fused, sgd or adafactor (TrainingArguments names)",
        examples=["adamw_torch"],
    )
    max_steps: PositiveInt | None = Field(
        default=None,
        description="Optimizer steps in all; overrides num_train_epochs",
        examples=[100],
    )
    lora: LoraSpec | None = Field(
        default=None,
        description="Train low-rank adapters only (peft): {r, alpha, dropout, target_modules}",
        examples=[{"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["query", "value"]}],
    )
    merge_lora: bool = Field(
        default=False,
        description="With lora: also save the adapters merged into a plain model",
        examples=[False],
    )
    load_in_4bit: bool = Field(
        default=False,
        description="QLoRA: the frozen base's linear layers held in 4 bits (bitsandbytes nf4, "
        "computed in bf16), the adapters trained in fp32; needs lora. The merged model is the "
        "adapters on the full-precision base (GET .../artifacts/model?merged=true)",
        examples=[True],
    )

    @field_validator("load_in_4bit")
    @classmethod
    def _four_bit_base_for_adapters(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("lora") is None:
            raise ValueError("load_in_4bit needs lora: a 4-bit base is frozen, adapters train")
        if value and info.data.get("merge_lora"):
            raise ValueError(
                "load_in_4bit: the adapters are merged into the full-precision "
                "base on download (artifacts/model?merged=true), not into 4 bits "
                "here: leave merge_lora false"
            )
        return value

    @field_validator("mixed_precision")
    @classmethod
    def _precision_fits_device(cls, value: str, info: ValidationInfo) -> str:
        if value == "fp16" and info.data.get("device") == "cpu":
            raise ValueError("fp16 needs a GPU (its gradient scaler is CUDA's); use bf16 on CPU")
        return value
