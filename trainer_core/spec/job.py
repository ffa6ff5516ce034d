"""The job spec: the one contract shared by the API, the worker and the training core.

Importing this module must stay cheap (no torch, no transformers): the API validates specs with it.
Field names follow ``transformers.TrainingArguments`` where one exists.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from trainer_core.spec.batching import accumulation_for, resolve_effective_batch
from trainer_core.spec.fields import (
    BUILTIN_DATASETS,
    BUILTIN_MODEL_TASKS,
    BUILTIN_MODELS,
    COLUMN_PATTERN,
    HUB_ID_PATTERN,
    Backend,
    MicroBatch,
    MixedPrecision,
    Optimizer,
    PositiveInt,
    SaveStrategy,
    SchedulerType,
    Task,
    check_column,
    check_source,
)
from trainer_core.spec.lora import LoraSpec

__all__ = ["BUILTIN_DATASETS", "BUILTIN_MODELS", "COLUMN_PATTERN", "HUB_ID_PATTERN", "JobSpec",
           "example_spec"]  # fmt: skip


class JobSpec(BaseModel):
    """What to train, on what, and how. Unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", str_max_length=1024, frozen=True)

    task: Task = Field(
        default="sequence-classification",
        description="sequence-classification (needs labels) or causal-lm (next-token prediction)",
        examples=["sequence-classification"],
    )
    backend: Backend = Field(
        default="pytorch",
        description="The training loop: plain PyTorch, HF Accelerate or the HF Trainer; "
        "all three give the same update for the same spec",
        examples=["pytorch"],
    )
    model: str = Field(
        description="builtin:tiny-bert (sequence-classification only), builtin:tiny-gpt2, "
        "an uploaded model (file-…), a save_pretrained directory under a data root, or a hub id "
        "('owner/name')",
        examples=["builtin:tiny-bert"],
    )
    dataset: str = Field(
        description="builtin:sentiment (labelled), builtin:tiny-stories (text only), an uploaded "
        "dataset (file-…), a .csv/.jsonl/.json/.parquet file under a data root, or a hub dataset "
        "id ('name' or 'name:config')",
        examples=["builtin:sentiment"],
    )
    eval_dataset: str | None = Field(
        default=None,
        description="Same forms as dataset; default: its validation split or a hold-out",
        examples=["builtin:sentiment"],
    )
    text_column: str = Field(
        default="text",
        description="The column holding the text: 1-128 letters, digits, spaces, '_', '-', '.'",
        examples=["text"],
    )
    label_column: str | None = Field(
        default=None,
        description="Classification only (none for causal-lm); defaults to 'label'",
        examples=["label"],
    )
    num_processes: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Data-parallel world size: processes (one per GPU, or gloo CPU processes) "
        "over all machines; the effective batch is micro-batch x K x num_processes",
        examples=[1],
    )
    num_machines: int = Field(
        default=1,
        ge=1,
        le=128,
        description="Machines the processes are spread over (num_processes must be a multiple)",
        examples=[1],
    )
    per_device_train_batch_size: MicroBatch | Literal["auto"] = Field(
        default=8,
        description="Samples per micro-batch, or 'auto': the largest that fits the memory "
        "budget (then effective_batch_size is required)",
        examples=[8],
    )
    gradient_accumulation_steps: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="K: micro-batches whose gradients make one optimizer step (exactly); "
        "default 1, or effective_batch_size / per_device_train_batch_size; chosen by the "
        "machine with 'auto'",
        examples=[4],
    )
    effective_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=1 << 24,
        validate_default=True,
        description="Samples per optimizer step (micro-batch x K); give it instead of K",
        examples=[32],
    )
    per_device_eval_batch_size: int = Field(
        default=32, ge=1, le=65536, description="Samples per evaluation batch", examples=[32]
    )
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
        default=1.0, ge=0, le=1e6, description="Clip the gradient norm; 0 disables clipping",
        examples=[1.0],
    )  # fmt: skip
    seed: int = Field(
        default=42, ge=0, le=2**32 - 1, description="Seeds weights, shuffling and dropout",
        examples=[42],
    )  # fmt: skip
    max_seq_length: int = Field(
        default=128, ge=2, le=32768, description="Tokens per sample (longer is cut)",
        examples=[128],
    )  # fmt: skip
    max_train_samples: PositiveInt | None = Field(
        default=None, description="Train on the first N samples only", examples=[64]
    )
    max_eval_samples: PositiveInt | None = Field(
        default=None, description="Evaluate on the first N samples only", examples=[32]
    )
    validation_split_percentage: int = Field(
        default=10,
        ge=1,
        le=50,
        description="Hold-out share of the training data when there is no eval dataset",
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

    @field_validator("model")
    @classmethod
    def _model_source(cls, value: str, info: ValidationInfo) -> str:
        value = check_source(value, builtins=BUILTIN_MODELS, what="model")
        task = info.data.get("task")
        if task is not None and task not in BUILTIN_MODEL_TASKS.get(value, (task,)):
            able = ", ".join(BUILTIN_MODEL_TASKS[value])
            raise ValueError(f"{value} cannot do task {task}; it does {able}")
        return value

    @field_validator("dataset", "eval_dataset")
    @classmethod
    def _dataset_source(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        value = check_source(value, builtins=tuple(BUILTIN_DATASETS), what="dataset")
        labelled = BUILTIN_DATASETS.get(value, True)
        if info.data.get("task") == "sequence-classification" and not labelled:
            raise ValueError(f"{value} has no labels; use it with task causal-lm")
        return value

    @field_validator("text_column", "label_column")
    @classmethod
    def _column_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        check_column(value)
        if info.field_name == "label_column" and info.data.get("task") == "causal-lm":
            raise ValueError("a causal-lm task has no label column")
        return value

    @field_validator("per_device_train_batch_size", mode="wrap")
    @classmethod
    def _micro_batch(cls, value: object, handler: ValidatorFunctionWrapHandler) -> object:
        """One error for the field, not one per member of ``int | "auto"``."""
        try:
            return handler(value)
        except ValidationError:
            raise ValueError("an integer from 1 to 65536, or 'auto'") from None

    @field_validator("effective_batch_size")
    @classmethod
    def _effective_batch(cls, value: int | None, info: ValidationInfo) -> int | None:
        """Two of (micro-batch, K, effective batch) decide the third; they must agree exactly."""
        if "per_device_train_batch_size" not in info.data:
            return value  # the micro-batch itself was invalid: reported on its own
        return resolve_effective_batch(
            info.data["per_device_train_batch_size"],
            info.data.get("gradient_accumulation_steps"),
            value,
            world=info.data.get("num_processes", 1),
        )

    @field_validator("mixed_precision")
    @classmethod
    def _precision_fits_device(cls, value: str, info: ValidationInfo) -> str:
        if value == "fp16" and info.data.get("device") == "cpu":
            raise ValueError("fp16 needs a GPU (its gradient scaler is CUDA's); use bf16 on CPU")
        return value

    @model_validator(mode="after")
    def _derived_fields(self) -> JobSpec:
        if self.max_memory_fraction is not None and self.max_memory_bytes is not None:
            raise ValueError("give max_memory_fraction or max_memory_bytes, not both")
        if self.merge_lora and self.lora is None:
            raise ValueError("merge_lora needs lora")
        b = self.per_device_train_batch_size
        if b != "auto" and self.gradient_accumulation_steps is None:
            assert self.effective_batch_size is not None  # resolved with b
            k = accumulation_for(self.effective_batch_size, b, self.num_processes)
            object.__setattr__(self, "gradient_accumulation_steps", k)
        return self

    @field_validator("eval_steps")
    @classmethod
    def _eval_steps_need_strategy(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("eval_strategy") != "steps":
            raise ValueError('eval_steps needs eval_strategy "steps"')
        return value

    @property
    def auto_micro_batch(self) -> bool:
        return self.per_device_train_batch_size == "auto"

    @field_validator("num_machines")
    @classmethod
    def _machines_divide_processes(cls, value: int, info: ValidationInfo) -> int:
        processes = info.data.get("num_processes", 1)
        if processes % value:
            raise ValueError(f"num_processes ({processes}) must be a multiple of num_machines")
        return value

    @property
    def processes_per_machine(self) -> int:
        return self.num_processes // self.num_machines

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
