"""What a training run is built from: the spec, data, model, optimizer, scheduler, the epoch plan's
loader, the micro-batch in force, and where the run starts (a checkpoint's ``RunState``, or the
beginning). The run's counts are derived here, once: its optimizer steps, its epochs (which one is
the last), and its micro-batches per epoch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedModel

from trainer_core.accumulation import MicroStep
from trainer_core.checkpoint.resume import RunState, spec_fingerprint
from trainer_core.data.load import JobData
from trainer_core.data.loader import EpochLoader
from trainer_core.data.plan import micro_batches_per_epoch
from trainer_core.distributed import SINGLE, World
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import CHECKPOINT_DIR

if TYPE_CHECKING:  # the objectives build on the plan and the math, never on the run's context
    from trainer_core.loop.objectives import Objective


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
    resumed: RunState | None = None  # the checkpoint this run starts from, at a window boundary
    tokenizer: Any = None  # saved with the final model
    world: World = SINGLE  # this process's rank among the job's data-parallel processes
    objective: Objective | None = None  # the method's part (``loop.objectives``): build's

    def micro_step(self, model: torch.nn.Module, batch: dict[str, Any]) -> MicroStep:
        """What every backend calls for a micro-batch: its share of the window's loss, as the
        run's objective computes it."""
        assert self.objective is not None  # build_context always sets it
        return self.objective.micro_step(model, batch)

    @property
    def fingerprint(self) -> str:
        return spec_fingerprint(self.spec)

    @property
    def num_epochs(self) -> int:
        """Epochs to run: the spec's, or as many as ``max_steps`` reaches into. The one answer to
        "which epoch is the last" (``is_last_epoch``)."""
        return -(-self.total_steps // self.steps_per_epoch)

    def is_last_epoch(self, epoch: int) -> bool:
        return epoch + 1 >= self.num_epochs

    def micro_batches_per_epoch(self, micro_batch_size: int | None = None) -> int:
        """Of ``micro_batch_size`` rows per rank (default: the micro-batch in force), over every
        rank: each global micro-batch is b x W rows of the epoch's plan."""
        b = micro_batch_size or self.micro_batch_size
        return micro_batches_per_epoch(len(self.data.train), b * self.world.size)

    @property
    def start_epoch(self) -> int:
        return self.resumed.epoch if self.resumed else 0

    @property
    def start_micro_step(self) -> int:
        return self.resumed.micro_step if self.resumed else 0

    @property
    def start_global_step(self) -> int:
        return self.resumed.global_step if self.resumed else 0

    @property
    def causal(self) -> bool:
        return self.spec.task == "causal-lm"

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / CHECKPOINT_DIR
