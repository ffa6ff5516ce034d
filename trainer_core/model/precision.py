"""Mixed precision for the loops we drive ourselves (the plain loop, the probe, evaluation).

bf16 autocasts the forward pass (CPU or GPU) and needs no scaler. fp16 autocasts on CUDA and
scales the loss: every micro-step back-propagates the scaled loss, and once per window the
gradients are unscaled (before clipping), the optimizer steps through the scaler and the scale is
updated. Our losses are always summed in float32 (``accumulation.summed_loss``).
Accelerate and the Trainer do the same with their own ``mixed_precision`` / ``bf16`` / ``fp16``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from trainer_core.spec.errors import JobError

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(mixed_precision: str, device: torch.device) -> None:
    if mixed_precision == "fp16" and device.type != "cuda":
        raise JobError(
            "mixed_precision: fp16 needs a GPU (its gradient scaler is CUDA's); use bf16 on CPU",
            param="mixed_precision",
        )


def autocast(mixed_precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    if mixed_precision == "no":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[mixed_precision])


def grad_scaler(mixed_precision: str) -> torch.amp.GradScaler | None:
    return torch.amp.GradScaler("cuda") if mixed_precision == "fp16" else None
