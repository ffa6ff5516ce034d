"""What every backend shares during a run: the loss meter, progress, stop requests, the end of an
epoch (evaluation, metrics record, checkpoint). A backend only drives forward/backward/step and
calls the three hooks ``after_micro_step``, ``after_optimizer_step`` and ``end_epoch``."""

from __future__ import annotations

import hashlib
import json
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm
from transformers import PreTrainedModel, TrainerState

from trainer_core.accumulation import micro_batches_per_epoch
from trainer_core.callbacks import StopCheck, TrainingCallback, TrainingCancelled
from trainer_core.checkpoint import save_checkpoint
from trainer_core.data import JobData
from trainer_core.evaluation import evaluate
from trainer_core.loader import EpochLoader
from trainer_core.spec import JobSpec


class TrainingPreempted(Exception):
    """Raised after a checkpoint was saved because the caller asked to preempt."""


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
    # Where this run starts (non-zero after a resume); all at window boundaries.
    start_epoch: int = 0
    start_micro_step: int = 0
    start_global_step: int = 0
    resume_state: dict[str, Any] = field(default_factory=dict)
    tokenizer: Any = None  # saved with the final model

    @property
    def fingerprint(self) -> str:
        """Identifies the spec a checkpoint belongs to: resuming under another spec is refused."""
        return hashlib.sha256(self.spec.model_dump_json().encode()).hexdigest()[:16]

    @property
    def causal(self) -> bool:
        return self.spec.task == "causal-lm"

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoint"


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


class RunSession:
    def __init__(
        self,
        ctx: RunContext,
        callback: TrainingCallback,
        should_stop: StopCheck,
        progress_bar: bool,
    ) -> None:
        self.ctx = ctx
        self.callback = callback
        self.should_stop = should_stop
        self.global_step = ctx.start_global_step
        self.metrics: list[dict[str, Any]] = list(ctx.resume_state.get("metrics", []))
        self.preempt_requested = False
        self.bar = tqdm(total=ctx.total_steps, initial=self.global_step, disable=not progress_bar)
        self.epoch = ctx.start_epoch
        self._reset_meter(ctx.start_micro_step, ctx.resume_state)
        if ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(ctx.device)  # peak of this run, not of the process

    def _reset_meter(self, micro_step: int, saved: dict[str, Any]) -> None:
        self.micro_step = micro_step
        self.loss_sum = torch.tensor(saved.get("loss_sum", 0.0), device=self.ctx.device)
        self.loss_items = int(saved.get("loss_items", 0))
        self.samples = 0
        self.started_at = time.perf_counter()

    def begin_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self._reset_meter(0, {})
        # The epoch's clock starts here, after the backend's own setup (the Trainer's is ~0.3 s),
        # so samples_per_second measures training alike in every backend.
        self.started_at = time.perf_counter()
        self.bar.set_description(f"epoch {epoch + 1}/{self.ctx.spec.num_train_epochs}")

    def after_micro_step(self, batch: dict[str, Any], summed: torch.Tensor) -> None:
        self.loss_sum += summed  # stays on the device: no host sync, no graph (summed is detached)
        self.loss_items += int(batch["n_items"])
        self.samples += int(batch["input_ids"].shape[0])
        self.micro_step += 1
        request = self.should_stop()
        if request == "cancel":
            raise TrainingCancelled
        if request == "preempt":
            self.preempt_requested = True

    def learning_rate(self) -> float:
        return float(self.ctx.optimizer.param_groups[0]["lr"])

    def after_optimizer_step(self) -> None:
        self.global_step += 1
        self.bar.update(1)
        self.callback.on_progress(
            {
                "epoch": self.epoch + 1,
                "step": self.global_step,
                "total_steps": self.ctx.total_steps,
                "micro_step": self.micro_step,
                "learning_rate": self.learning_rate(),
            }
        )
        if self.preempt_requested:
            self.save(epoch=self.epoch, micro_step=self.micro_step)
            raise TrainingPreempted

    def end_epoch(self) -> dict[str, Any]:
        seconds = time.perf_counter() - self.started_at
        ctx = self.ctx
        train_loss = self.loss_sum.item() / max(self.loss_items, 1)  # host sync: once per epoch
        record: dict[str, Any] = {"epoch": self.epoch + 1, "train_loss": train_loss}
        record |= evaluate(
            ctx.model,
            ctx.data.eval,
            batch_size=ctx.spec.per_device_eval_batch_size,
            pad_id=ctx.pad_id,
            device=ctx.device,
            num_classes=len(ctx.data.label_names) if ctx.data.label_names else None,
        )
        record |= {
            "learning_rate": self.learning_rate(),
            "optimizer_steps": self.global_step,
            "train_samples": self.samples,
            "train_seconds": round(seconds, 4),
            "samples_per_second": round(self.samples / seconds, 2) if seconds > 0 else None,
            "peak_memory_bytes": peak_memory_bytes(ctx.device),
        }
        self.metrics.append(record)
        with (ctx.output_dir / "metrics.jsonl").open("a") as out:
            out.write(json.dumps(record) + "\n")
        self.callback.on_epoch_end(record)
        self.save(epoch=self.epoch + 1, micro_step=0)
        return record

    def save(self, *, epoch: int, micro_step: int) -> None:
        ctx = self.ctx
        batch_size = ctx.spec.per_device_train_batch_size
        trainer_state = TrainerState(
            global_step=self.global_step,
            epoch=epoch + micro_step / micro_batches_per_epoch(len(ctx.data.train), batch_size),
            max_steps=ctx.total_steps,
            num_train_epochs=ctx.spec.num_train_epochs,
            train_batch_size=batch_size,
        )
        partial = micro_step > 0
        state = {
            "epoch": epoch,
            "micro_step": micro_step,
            "global_step": self.global_step,
            "metrics": self.metrics,
            "loss_sum": self.loss_sum.item() if partial else 0.0,
            "loss_items": self.loss_items if partial else 0,
            "backend": ctx.spec.backend,
            "spec": ctx.fingerprint,
        }
        save_checkpoint(
            ctx.checkpoint_dir,
            model=ctx.model,
            optimizer=ctx.optimizer,
            scheduler=ctx.scheduler,
            trainer_state=trainer_state,
            state=state,
        )
        self.callback.on_checkpoint(
            {"path": str(ctx.checkpoint_dir), "epoch": epoch, "step": self.global_step}
        )

    def close(self) -> None:
        self.bar.close()
