"""The plain PyTorch loop: the reference the other backends are checked against."""

from __future__ import annotations

from typing import Any

import torch

from trainer_core.accumulation import micro_step_loss
from trainer_core.session import RunSession


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }


class PlainLoop:
    def run(self, session: RunSession) -> None:
        ctx = session.ctx
        model, optimizer, scheduler = ctx.model, ctx.optimizer, ctx.scheduler
        model.train()
        ctx.loader.dataset.resume_at(ctx.start_epoch, ctx.start_micro_step)
        for epoch in range(ctx.start_epoch, ctx.spec.num_train_epochs):
            ctx.loader.set_epoch(epoch)
            session.begin_epoch(epoch)
            for cpu_batch in ctx.loader:
                batch = to_device(cpu_batch, ctx.device)
                loss, summed = micro_step_loss(model, batch, ctx.causal)
                loss.backward()  # type: ignore[no-untyped-call]  # loss is already Σ/N_window: gradients add up to the window mean
                session.after_micro_step(batch, summed)
                if batch["last_in_window"]:
                    if ctx.spec.max_grad_norm > 0:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), ctx.spec.max_grad_norm)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
                    session.after_optimizer_step()
            session.end_epoch()
