"""Hugging Face Accelerate: ``Accelerator(gradient_accumulation_steps=K)`` and ``accumulate``.

Accelerate decides when to sync and step (every K micro-batches, and at the end of the prepared
dataloader for a partial window). Its ``backward`` always divides the loss by K, which under-weights
a partial window; our loss is already normalised by the window's item count, so we hand it over
multiplied by K and Accelerate's division cancels exactly.
"""

from __future__ import annotations

from accelerate import Accelerator

from trainer_core.accumulation import micro_step_loss
from trainer_core.session import RunSession


class AccelerateLoop:
    def run(self, session: RunSession) -> None:
        ctx = session.ctx
        k = ctx.spec.gradient_accumulation_steps
        accelerator = Accelerator(gradient_accumulation_steps=k, cpu=ctx.device.type == "cpu")
        model, optimizer, loader, scheduler = accelerator.prepare(
            ctx.model, ctx.optimizer, ctx.loader, ctx.scheduler
        )
        model.train()
        ctx.loader.dataset.resume_at(ctx.start_epoch, ctx.start_micro_step)
        for epoch in range(ctx.start_epoch, ctx.spec.num_train_epochs):
            loader.set_epoch(epoch)  # DataLoaderShard re-applies its own epoch on every iter()
            session.begin_epoch(epoch)
            for batch in loader:
                with accelerator.accumulate(model):
                    loss, summed = micro_step_loss(model, batch, ctx.causal)
                    accelerator.backward(loss * accelerator.gradient_accumulation_steps)
                    session.after_micro_step(batch, summed)
                    if accelerator.sync_gradients != batch["last_in_window"]:
                        raise RuntimeError("Accelerate's window disagrees with the plan")
                    if accelerator.sync_gradients and ctx.spec.max_grad_norm > 0:
                        accelerator.clip_grad_norm_(model.parameters(), ctx.spec.max_grad_norm)
                    optimizer.step()  # a no-op until the window's last micro-batch
                    scheduler.step()
                    optimizer.zero_grad()
                if accelerator.sync_gradients:
                    session.after_optimizer_step()
            session.end_epoch()
        accelerator.free_memory()
