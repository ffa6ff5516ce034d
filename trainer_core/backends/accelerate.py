"""Hugging Face Accelerate: ``Accelerator(gradient_accumulation_steps=K)`` and ``accumulate``.

Accelerate decides when to sync and step (every K micro-batches, and at the end of the prepared
dataloader for a partial window); the run checks that decision against the plan. Its ``backward``
always divides the loss by K, which under-weights a partial window; our loss is already normalised
by the window's item count, so we hand it over multiplied by K and Accelerate's division cancels
exactly.

With several processes (``accelerate launch`` or torchrun) ``prepare`` wraps the model in DDP and
``accumulate`` holds the all-reduce back until the window's last micro-batch. Our loader already
hands each rank its own share, so it is wrapped for a single process (no second sharding), and the
scheduler is stepped by us, once per window (a prepared one would step once per process).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.data_loader import prepare_data_loader
from accelerate.state import AcceleratorState, GradientState

from trainer_core.accumulation import MicroStep
from trainer_core.checkpoint.resume import restore_weights
from trainer_core.distributed import ddp_ready
from trainer_core.loop.run import TrainingRun
from trainer_core.model.sharding import fsdp_plugin, local_norm, shard_on_cpu


class AccelerateLoop:
    def run(self, run: TrainingRun) -> None:
        ctx = run.ctx
        self.ctx, self.max_grad_norm = ctx, ctx.spec.max_grad_norm
        # One Accelerator per run, configured by this run's spec: a process that trains again (an
        # in-process retry, a test) must not inherit the previous run's precision or K.
        # (The process group of a multi-process job stays: only a single process resets it.)
        AcceleratorState._reset_state(reset_partial_state=not ctx.world.distributed)
        GradientState._reset_state()
        plugin = fsdp_plugin(ctx.model) if ctx.spec.sharding == "fsdp" else None
        self.accelerator = Accelerator(
            gradient_accumulation_steps=ctx.accumulation,
            mixed_precision=ctx.spec.mixed_precision,
            cpu=ctx.device.type == "cpu",
            fsdp_plugin=plugin,
        )
        if plugin is not None:
            shard_on_cpu(self.accelerator, plugin)
        self.model, self.optimizer = self.accelerator.prepare(ctx.model, ctx.optimizer)
        if ctx.spec.sharding == "fsdp" and ctx.resumed is not None:  # its shards, once sharded
            restore_weights(ctx.checkpoint_dir, ctx.model, ctx.optimizer)
        self.scheduler = ctx.scheduler
        # Wrapped like prepare() would, for a world of one: it still marks the end of the epoch,
        # which closes a partial last window.
        self.loader = prepare_data_loader(
            ctx.loader,
            self.accelerator.device,
            num_processes=1,
            process_index=0,
            put_on_device=True,
        )
        ddp_ready(self.model)
        try:
            run.drive(self)
        finally:
            self.accelerator.free_memory()

    def batches(self, epoch: int) -> Iterator[dict[str, Any]]:
        self.loader.set_epoch(epoch)  # DataLoaderShard re-applies its own epoch on every iter()
        yield from self.loader

    def forward_backward(self, batch: dict[str, Any]) -> MicroStep:
        with self.accelerator.accumulate(self.model):  # decides sync_gradients for this batch
            step = self.ctx.micro_step(self.model, batch)
            self.accelerator.backward(step.loss * self.accelerator.gradient_accumulation_steps)
        return step

    def window_closes(self, batch: dict[str, Any]) -> bool:
        return bool(self.accelerator.sync_gradients)

    def optimizer_step(self) -> torch.Tensor | None:
        # max_norm=inf measures without clipping; the norm stays on the device until logged.
        max_norm = self.max_grad_norm if self.max_grad_norm > 0 else math.inf
        grad_norm: torch.Tensor | None = self.accelerator.clip_grad_norm_(
            self.model.parameters(), max_norm
        )
        grad_norm = None if grad_norm is None else local_norm(grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        return grad_norm
