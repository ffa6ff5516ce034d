"""The run's checkpoints: when to save (the spec's policy, agreed by the ranks), what (the weights,
optimizer, scheduler and RNG with a ``RunState``), and reporting each once it is on disk."""

from __future__ import annotations

from typing import Any

from trainer_core.checkpoint.policy import SavePolicy
from trainer_core.checkpoint.resume import RunState
from trainer_core.checkpoint.writer import CheckpointWriter
from trainer_core.distributed import barrier, sum_over_ranks
from trainer_core.loop.context import RunContext
from trainer_core.model.sharding import is_sharded
from trainer_core.spec.callbacks import TrainingCallback


class RunCheckpoints:
    def __init__(self, ctx: RunContext, callback: TrainingCallback) -> None:
        self.ctx, self.callback = ctx, callback
        # Saves are written in the background (the training thread only copies the state).
        self.writer = CheckpointWriter(ctx.checkpoint_dir, keep=ctx.spec.save_total_limit)
        self.policy = SavePolicy(ctx.spec)

    def due(self, global_step: int, *, ends_epoch: bool, ends_run: bool) -> bool:
        """The policy's answer for the window just closed. Ranks save together (a save has
        collectives): a time-based policy, whose clock each rank reads alone, is agreed."""
        wanted = self.policy.due(global_step, ends_epoch=ends_epoch, ends_run=ends_run)
        if not self.ctx.world.distributed:
            return wanted
        return sum_over_ranks([float(wanted)], self.ctx.world)[0] > 0

    def save(self, state: RunState, *, keep_step: int | None = None) -> None:
        """A checkpoint at a window boundary, at ``state``'s position; ``keep_step``'s
        checkpoint (the best) is kept beyond ``save_total_limit``."""
        ctx, world = self.ctx, self.ctx.world
        batch_size = state.micro_batch_size * world.size  # the global micro-batch
        micro_per_epoch = ctx.micro_batches_per_epoch(state.micro_batch_size)
        # Imported here: transformers.trainer_callback pulls in peft (~0.2 s) at import.
        from transformers import TrainerState

        trainer_state = TrainerState(
            global_step=state.global_step,
            epoch=state.epoch + state.micro_step / micro_per_epoch,
            max_steps=ctx.total_steps,
            num_train_epochs=ctx.num_epochs,
            train_batch_size=batch_size,
        )
        info = {"path": str(ctx.checkpoint_dir), "epoch": state.epoch, "step": state.global_step}
        self.policy.saved()
        if is_sharded(ctx.model):  # each rank writes its shards, together
            self._report(
                self.writer.save_sharded(
                    info,
                    world=world,
                    model=ctx.model,
                    optimizer=ctx.optimizer,
                    scheduler=ctx.scheduler,
                    trainer_state=trainer_state,
                    state=state.to_json(),
                    keep_step=keep_step,
                )
            )
            return
        # Every rank holds the same weights and optimizer state after a window's all-reduce:
        # rank 0 copies them and writes them in the background; the others wait for the copy.
        if world.is_main:
            done = self.writer.save(
                info,
                model=ctx.model,
                optimizer=ctx.optimizer,
                scheduler=ctx.scheduler,
                trainer_state=trainer_state,
                state=state.to_json(),
                keep_step=keep_step,
            )
            self._report(done)
        barrier(world)

    def report(self, *, block: bool) -> None:
        """Report each checkpoint once it is on disk (the writer works in the background)."""
        self._report(self.writer.collect(block=block))

    def _report(self, infos: list[dict[str, Any]]) -> None:
        for info in infos:
            self.callback.on_checkpoint(info)

    @property
    def stalls(self) -> list[float]:
        """Seconds the training thread was blocked, per save."""
        return self.writer.stalls
