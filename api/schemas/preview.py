"""POST /v1/files/{id}/preview: the job's data fields asked about, and what they would train."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainer_core.spec.fields import MicroBatch, MixedPrecision, Optimizer

MAX_PREVIEW_ROWS = 50  # trainer_core.preview.MAX_ROWS


class PreviewRequest(BaseModel):
    """A model and the data fields of the job (``JobSpec``'s names and defaults); the file is the
    dataset. Checked as a job's spec is: a wrong field is a 4xx naming it."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="As a job's: builtin:tiny-chat, file-…, ft:…, a hub id")
    rows: int = Field(default=5, ge=1, le=MAX_PREVIEW_ROWS, description="The first N rows")
    chat_template: str | None = None
    dataset_format: Literal["auto", "text", "messages", "prompt-completion"] = "auto"
    messages_column: str | None = None
    prompt_column: str | None = None
    completion_column: str | None = None
    text_column: str | None = None
    max_seq_length: int | None = None
    assistant_only_loss: bool = True
    completion_only_loss: bool = True
    train_empty_reasoning: bool = True
    # The fields the memory plan reads; unset, the job's defaults. Checked as a job's are.
    per_device_train_batch_size: MicroBatch | Literal["auto"] | None = None
    gradient_accumulation_steps: int | None = None
    num_processes: int | None = None
    sharding: Literal["none", "fsdp"] | None = None
    lora: dict[str, Any] | None = None
    load_in_4bit: bool | None = None
    gradient_checkpointing: bool | None = None
    mixed_precision: MixedPrecision | None = None
    optim: Optimizer | None = None
    loss_chunk_tokens: int | None = None


class PreviewToken(BaseModel):
    text: str
    trained: bool = Field(description="Its prediction from the tokens before it is in the loss")


class PreviewRow(BaseModel):
    index: int = Field(description="The row's position in the file, from 0")
    tokens: list[PreviewToken]
    trained: int = Field(description="Trained tokens: what the trainer divides the loss by")
    total: int = Field(description="Tokens after truncation at max_seq_length")
    warnings: list[str]


class MemoryPlanRead(BaseModel):
    """Bytes per device at the micro-batch and max_seq_length (a step's peak: the weights and
    optimizer state, then the larger of the gradients and activations + logits)."""

    weights: int
    gradients: int
    optimizer: int
    activations: int = Field(description="Saved for the backward, without checkpointing")
    activations_checkpointed: int = Field(description="With gradient_checkpointing")
    logits: int = Field(description="Whole logits and their gradient, or a chunk's")
    backward_start: int = Field(
        description="Sharded: the vocabulary unit's gradients beside the activations as the "
        "backward starts"
    )
    checkpointing: bool
    device: int | None = Field(description="A device's memory (GRADACC_DEVICE_MEMORY_GB)")
    micro_batch: int
    seq_len: int
    shards: int
    total: int
    fits: bool | None = Field(description="total <= device; null when the device is not known")
    line: str


class PreviewRead(BaseModel):
    format: str
    max_length: int = Field(description="max_seq_length, at most the model's context")
    rows: list[PreviewRow]
    memory_plan: MemoryPlanRead | None = Field(
        default=None, description="Null for a model whose config is not at hand, or a classifier"
    )
