"""Hints for a spec field that does not exist: the names users bring from other trainers, and
near misses. Used by the API's validation errors."""

from __future__ import annotations

import difflib

from trainer_core.spec.job import JobSpec

# Names users bring from other trainers, and what this spec calls them.
HABITS = {
    "lr": "learning_rate",
    "batch_size": "per_device_train_batch_size",
    "train_batch_size": "per_device_train_batch_size",
    "eval_batch_size": "per_device_eval_batch_size",
    "epochs": "num_train_epochs",
    "num_epochs": "num_train_epochs",
    "grad_accum": "gradient_accumulation_steps",
    "accumulation_steps": "gradient_accumulation_steps",
    "scheduler": "lr_scheduler_type",
    "model_name_or_path": "model",
    "dataset_name": "dataset",
}
UNSUPPORTED = {
    "fp16": "did you mean 'mixed_precision': 'fp16'?",
    "bf16": "did you mean 'mixed_precision': 'bf16'?",
}


def unknown_field_hint(name: str) -> str | None:
    """What to say about an unknown field: the known name it probably means, or why it has none.

    Example:
        >>> unknown_field_hint("lr")
        "did you mean 'learning_rate'?"
    """
    if name in UNSUPPORTED:
        return UNSUPPORTED[name]
    known = HABITS.get(name) or next(
        iter(difflib.get_close_matches(name, list(JobSpec.model_fields), n=1, cutoff=0.75)), None
    )
    return f"did you mean {known!r}?" if known else None
