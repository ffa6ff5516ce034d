"""The plain PyTorch loop: the reference the other backends are checked against.

With fp16 the loss is scaled on every micro-step and the gradients unscaled once per window,
before clipping; the scheduler does not step when the scaler skipped an overflowing step (as in
Accelerate and the Trainer).

With several processes the model is wrapped in DDP, and every micro-batch but a window's last
runs under ``no_sync()``: gradients are all-reduced once per window (``distributed``). A sharded
model (``sharding: "fsdp"``, sharded as the run was built: ``model.sharding``) is DDP's twin: every
backward but a window's last keeps its gradients (``set_requires_gradient_sync(False)``), the
last reduce-scatters them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from trainer_core.accumulation import MicroStep
from trainer_core.distributed import wrap
from trainer_core.loop.run import TrainingRun
from trainer_core.model.precision import autocast, grad_scaler
from trainer_core.model.sharding import is_sharded, local_norm, set_gradient_sync


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }


class PlainLoop:
    def run(self, run: TrainingRun) -> None:
        self.ctx = run.ctx
        self.scaler = grad_scaler(run.ctx.spec.mixed_precision)
        self.model: torch.nn.Module = run.ctx.model
        self.sharded = is_sharded(run.ctx.model)
        if run.ctx.world.distributed and not self.sharded:
            self.model = wrap(run.ctx.model, run.ctx.device)
        run.drive(self)

    def batches(self, epoch: int) -> Iterator[dict[str, Any]]:
        self.ctx.loader.set_epoch(epoch)
        for batch in self.ctx.loader:
            yield to_device(batch, self.ctx.device)

    def forward_backward(self, batch: dict[str, Any]) -> MicroStep:
        if self.sharded:
            set_gradient_sync(self.model, bool(batch["last_in_window"]))
        with self._sync_context(batch):
            with autocast(self.ctx.spec.mixed_precision, self.ctx.device):
                step = self.ctx.micro_step(self.model, batch)
            loss = step.loss if self.scaler is None else self.scaler.scale(step.loss)
            loss.backward()  # type: ignore[no-untyped-call]  # loss is already Σ/N_window: gradients add up to the window mean
        return step

    def _sync_context(self, batch: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
        """Inside a window a DDP rank keeps its gradients; the window's last backward syncs."""
        if isinstance(self.model, DistributedDataParallel) and not batch["last_in_window"]:
            return self.model.no_sync()
        return contextlib.nullcontext()

    def window_closes(self, batch: dict[str, Any]) -> bool:
        return bool(batch["last_in_window"])  # the plan is this loop's only rule

    def optimizer_step(self) -> torch.Tensor:
        ctx, scaler = self.ctx, self.scaler
        if scaler is not None:
            scaler.unscale_(ctx.optimizer)  # once per window: clipping sees the true gradients
        # max_norm=inf measures without clipping; the norm stays on the device until logged.
        max_norm = ctx.spec.max_grad_norm if ctx.spec.max_grad_norm > 0 else math.inf
        grad_norm = local_norm(torch.nn.utils.clip_grad_norm_(ctx.model.parameters(), max_norm))
        if scaler is None:
            ctx.optimizer.step()
            ctx.scheduler.step()
        else:
            scale = scaler.get_scale()
            scaler.step(ctx.optimizer)
            scaler.update()
            if scaler.get_scale() >= scale:  # a lowered scale means the step was skipped
                ctx.scheduler.step()
        ctx.optimizer.zero_grad(set_to_none=True)
        return grad_norm
