"""The plain PyTorch loop: the reference the other backends are checked against.

With several processes the model is wrapped in DDP, and every micro-batch but a window's last
runs under ``no_sync()``: gradients are all-reduced once per window (``distributed``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from trainer_core.accumulation import micro_step_loss
from trainer_core.distributed import wrap
from trainer_core.run import TrainingRun


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }


class PlainLoop:
    def run(self, run: TrainingRun) -> None:
        self.ctx = run.ctx
        self.model: torch.nn.Module = run.ctx.model
        if run.ctx.world.distributed:
            self.model = wrap(run.ctx.model, run.ctx.device)
        run.drive(self)

    def batches(self, epoch: int) -> Iterator[dict[str, Any]]:
        self.ctx.loader.set_epoch(epoch)
        for batch in self.ctx.loader:
            yield to_device(batch, self.ctx.device)

    def forward_backward(self, batch: dict[str, Any]) -> torch.Tensor:
        with self._sync_context(batch):
            loss, summed = micro_step_loss(self.model, batch, self.ctx.causal)
            loss.backward()  # type: ignore[no-untyped-call]  # loss is already Σ/N_window: gradients add up to the window mean
        return summed

    def _sync_context(self, batch: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
        """Inside a window a DDP rank keeps its gradients; the window's last backward syncs."""
        if isinstance(self.model, DistributedDataParallel) and not batch["last_in_window"]:
            return self.model.no_sync()
        return contextlib.nullcontext()

    def window_closes(self, batch: dict[str, Any]) -> bool:
        return bool(batch["last_in_window"])  # the plan is this loop's only rule

    def optimizer_step(self) -> None:
        ctx = self.ctx
        if ctx.spec.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(ctx.model.parameters(), ctx.spec.max_grad_norm)
        ctx.optimizer.step()
        ctx.scheduler.step()
        ctx.optimizer.zero_grad(set_to_none=True)
