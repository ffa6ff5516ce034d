"""Optimizer and scheduler, built once here and handed to every backend (the Trainer included),
so all three start from the same parameter groups and the same schedule."""

from __future__ import annotations

import torch
from transformers import get_scheduler

from trainer_core.spec import JobSpec


def build_optimizer(model: torch.nn.Module, spec: JobSpec) -> torch.optim.Optimizer:
    """AdamW; no weight decay on biases and norm weights (every parameter with < 2 dims)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": spec.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=spec.learning_rate)


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
