"""What a training run is built from: the spec, data, model, optimizer, scheduler, the epoch plan's
loader, and where the run starts (non-zero after a resume)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from trainer_core.data import JobData
from trainer_core.distributed import SINGLE, World
from trainer_core.loader import EpochLoader
from trainer_core.spec import JobSpec


def spec_fingerprint(spec: JobSpec) -> str:
    """Identifies the spec a checkpoint belongs to: resuming under another spec is refused."""
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:16]


@dataclass
class RunContext:
    spec: JobSpec
    data: JobData
    model: PreTrainedModel
    pad_id: int
    device: torch.device
    loader: EpochLoader
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    output_dir: Path
    steps_per_epoch: int
    total_steps: int
    # The micro-batch and K in force: the spec's, the probe's ("auto"), or halved after running
    # out of memory. Their product (x world size) is always the spec's effective batch.
    micro_batch_size: int
    accumulation: int
    # Where this run starts (non-zero after a resume); all at window boundaries.
    start_epoch: int = 0
    start_micro_step: int = 0
    start_global_step: int = 0
    resume_state: dict[str, Any] = field(default_factory=dict)
    tokenizer: Any = None  # saved with the final model
    world: World = SINGLE  # this process's rank among the job's data-parallel processes

    @property
    def fingerprint(self) -> str:
        return spec_fingerprint(self.spec)

    @property
    def num_epochs(self) -> int:
        """Epochs to run: the spec's, or as many as ``max_steps`` reaches into."""
        return -(-self.total_steps // self.steps_per_epoch)

    @property
    def causal(self) -> bool:
        return self.spec.task == "causal-lm"

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoint"
