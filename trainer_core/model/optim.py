"""Optimizer and scheduler, built once here and handed to every backend (the Trainer included),
so all three start from the same parameter groups and the same schedule."""

from __future__ import annotations

import torch
from transformers import get_scheduler
from transformers.optimization import Adafactor

from trainer_core.spec.job import JobSpec


def build_optimizer(model: torch.nn.Module, spec: JobSpec) -> torch.optim.Optimizer:
    """``spec.optim`` over the trainable parameters (LoRA: the adapters and a new head only), as
    ``TrainingArguments.optim`` builds it; no weight decay on biases and norm weights (every
    parameter with < 2 dims)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": spec.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    lr = spec.learning_rate
    if spec.optim == "sgd":
        return torch.optim.SGD(groups, lr=lr)
    if spec.optim == "adafactor":
        # The Trainer's settings: a fixed learning rate, no relative step or parameter scaling.
        return Adafactor(groups, lr=lr, scale_parameter=False, relative_step=False)  # type: ignore[no-untyped-call]
    # torch's fused AdamW runs on CUDA and, since torch 2.4, on CPU: offered on both.
    return torch.optim.AdamW(groups, lr=lr, fused=spec.optim == "adamw_torch_fused" or None)


def build_scheduler(
    optimizer: torch.optim.Optimizer, spec: JobSpec, total_steps: int
) -> torch.optim.lr_scheduler.LRScheduler:
    scheduler: torch.optim.lr_scheduler.LRScheduler = get_scheduler(
        spec.lr_scheduler_type,
        optimizer,
        num_warmup_steps=spec.warmup_steps,
        num_training_steps=total_steps,
    )
    return scheduler
