"""The job spec: the one contract shared by the API, the worker and the training core.

Importing this module must stay cheap (no torch, no transformers): the API validates specs with it.
Field names follow ``transformers.TrainingArguments`` where one exists. The fields are written in
four groups, one module each (data with its preference part, batch, training, run), in this
order: a validator reads the fields before its own (``info.data``), and the API shows them so.
"""

from __future__ import annotations

from pydantic import model_validator

from trainer_core.spec.batch_fields import BatchFields
from trainer_core.spec.batching import accumulation_for
from trainer_core.spec.dpo import PreferenceFields
from trainer_core.spec.fields import (
    BUILTIN_DATASETS,
    BUILTIN_MODELS,
    COLUMN_PATTERN,
    HUB_ID_PATTERN,
)
from trainer_core.spec.grpo import GrpoFields
from trainer_core.spec.run_fields import RunFields
from trainer_core.spec.training_fields import TrainingFields

__all__ = [
    "BUILTIN_DATASETS",
    "BUILTIN_MODELS",
    "COLUMN_PATTERN",
    "HUB_ID_PATTERN",
    "JobSpec",
    "example_spec",
]


# Fields are collected from the last base to the first: data (and preference), grpo, batch,
# training, then run.
class JobSpec(RunFields, TrainingFields, BatchFields, GrpoFields, PreferenceFields):
    """What to train, on what, and how. Unknown fields are rejected."""

    @model_validator(mode="after")
    def _derived_fields(self) -> JobSpec:
        if self.max_memory_fraction is not None and self.max_memory_bytes is not None:
            raise ValueError("give max_memory_fraction or max_memory_bytes, not both")
        if self.merge_lora and self.lora is None:
            raise ValueError("merge_lora needs lora")
        if self.method == "dpo" and self.per_device_train_batch_size == "auto":
            raise ValueError(
                "per_device_train_batch_size: give a number of pairs for dpo (the "
                "'auto' probe measures rows of one sequence, a pair has two)"
            )
        if self.method == "grpo" and self.per_device_train_batch_size == "auto":
            raise ValueError(
                "per_device_train_batch_size: give a number of completions for "
                "grpo (the 'auto' probe measures dataset rows, not rollouts)"
            )
        if self.sharding == "fsdp":
            _shardable(self)
        b = self.per_device_train_batch_size
        if b != "auto" and self.gradient_accumulation_steps is None:
            assert self.effective_batch_size is not None  # resolved with b
            k = accumulation_for(self.effective_batch_size, b, self.num_processes)
            object.__setattr__(self, "gradient_accumulation_steps", k)
        return self


def _shardable(spec: JobSpec) -> None:
    """What a sharded job cannot do yet, refused by the field to change."""
    if spec.method == "grpo":
        raise ValueError("sharding: grpo samples with the whole model on each rank; use 'none'")
    if spec.load_in_4bit:
        raise ValueError("sharding: a 4-bit base is not sharded here; use 'none' with QLoRA")
    if spec.merge_lora:
        raise ValueError(
            "merge_lora: a sharded job saves its adapters; download them merged "
            "(GET .../artifacts/model?merged=true)"
        )
    if spec.per_device_train_batch_size == "auto":
        raise ValueError(
            "per_device_train_batch_size: 'auto' probes the whole model on one device; "
            "give a number with sharding (the memory plan shows what fits)"
        )


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
