"""How the core reports to its caller. Plain dicts out, a stop request in; no web, no database.

Importing this module is cheap (no torch), so the worker can subclass ``TrainingCallback`` freely.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# "cancel": stop between micro-steps, keep nothing. "preempt": stop at the next optimizer-step
# boundary, save a checkpoint, and report status "preempted" so the job can be resumed.
StopRequest = Literal["cancel", "preempt"]
StopCheck = Callable[[], StopRequest | None]
Status = Literal["completed", "cancelled", "preempted"]


class TrainingCancelled(Exception):
    """Raised inside a backend when the caller asked to cancel; caught by ``train``."""


class TrainingCallback:
    """Receives everything the core reports. Override what you need; the default does nothing.

    on_start:      {"total_steps", "steps_per_epoch", "micro_batches_per_epoch", "num_train_samples",
                    "num_eval_samples", "effective_batch_size", "start_epoch", "start_step"}
    on_progress:   {"epoch", "step", "total_steps", "micro_step", "learning_rate"}; "step" counts
                   optimizer steps since the start of the job (resumes included).
    on_epoch_end:  one metrics record: {"epoch", "train_loss", "eval_loss", then "eval_accuracy"
                   and "eval_f1" (classification) or "eval_perplexity" (causal LM),
                   "learning_rate", "optimizer_steps", "train_samples", "train_seconds",
                   "samples_per_second", "peak_memory_bytes"} (``TrainingRun.end_epoch``).
    on_step_metrics: every ``logging_steps`` optimizer steps (and at each ``eval_steps`` with
                   ``eval_strategy: "steps"``): {"step", "epoch" (fractional), "train_loss" (the
                   exact mean of that step's window), "grad_norm" (before clipping),
                   "samples_per_second" (since the previous record), "learning_rate",
                   "elapsed_seconds", "eta_seconds"}, plus the eval keys when it evaluated.
    on_checkpoint: {"path", "epoch", "step"} after a checkpoint is complete on disk.
    on_batch_size: {"micro_batch_size", "gradient_accumulation_steps", "effective_batch_size",
                    "reason", "tried", ...} when the run starts and whenever the micro-batch
                   changes: "spec", "probe" (with "budget_bytes"), "checkpoint" (a resume),
                   "out_of_memory" (halved: "tried" lists every size so far).
    """

    def on_start(self, info: dict[str, Any]) -> None:
        pass

    def on_progress(self, progress: dict[str, Any]) -> None:
        pass

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        pass

    def on_step_metrics(self, record: dict[str, Any]) -> None:
        pass

    def on_checkpoint(self, info: dict[str, Any]) -> None:
        pass

    def on_batch_size(self, info: dict[str, Any]) -> None:
        pass


NULL_CALLBACK = TrainingCallback()


def never_stop() -> StopRequest | None:
    return None


@dataclass
class TrainResult:
    status: Status
    metrics: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    output_dir: Path | None = None
