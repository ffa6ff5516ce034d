"""The plain PyTorch loop: the reference the other backends are checked against."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from trainer_core.accumulation import micro_step_loss
from trainer_core.run import TrainingRun


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }


class PlainLoop:
    def run(self, run: TrainingRun) -> None:
        self.ctx = run.ctx
        run.drive(self)

    def batches(self, epoch: int) -> Iterator[dict[str, Any]]:
        self.ctx.loader.set_epoch(epoch)
        for batch in self.ctx.loader:
            yield to_device(batch, self.ctx.device)

    def forward_backward(self, batch: dict[str, Any]) -> torch.Tensor:
        loss, summed = micro_step_loss(self.ctx.model, batch, self.ctx.causal)
        loss.backward()  # type: ignore[no-untyped-call]  # loss is already Σ/N_window: gradients add up to the window mean
        return summed

    def window_closes(self, batch: dict[str, Any]) -> bool:
        return bool(batch["last_in_window"])  # the plan is this loop's only rule

    def optimizer_step(self) -> torch.Tensor:
        ctx = self.ctx
        # max_norm=inf measures without clipping; the norm stays on the device until logged.
        max_norm = ctx.spec.max_grad_norm if ctx.spec.max_grad_norm > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(ctx.model.parameters(), max_norm)
        ctx.optimizer.step()
        ctx.scheduler.step()
        ctx.optimizer.zero_grad(set_to_none=True)
        return grad_norm
