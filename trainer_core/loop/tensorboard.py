"""``report_to: ["tensorboard"]``: step and epoch metrics as TensorBoard event files in the run's
``tensorboard/`` folder (among the job's outputs), alongside whatever callback the caller gave.

Needs the ``tensorboard`` package (the ``tensorboard`` extra); torch's ``SummaryWriter`` writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer_core.spec.callbacks import TrainingCallback
from trainer_core.spec.errors import JobError


class TensorBoardCallback(TrainingCallback):
    """Writes scalars, then hands every report on to ``inner``."""

    def __init__(self, inner: TrainingCallback, log_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # torch raises ImportError without the tensorboard package
            raise JobError(
                "report_to: tensorboard is not installed on this server", param="report_to"
            ) from exc
        self.inner = inner
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def _scalars(self, prefix: str, record: dict[str, Any], step: int) -> None:
        for key, value in record.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and key != "step":
                self.writer.add_scalar(f"{prefix}/{key}", value, step)

    def on_start(self, info: dict[str, Any]) -> None:
        self.inner.on_start(info)

    def on_progress(self, progress: dict[str, Any]) -> None:
        self.inner.on_progress(progress)

    def on_step_metrics(self, record: dict[str, Any]) -> None:
        self._scalars("train", record, int(record["step"]))
        self.inner.on_step_metrics(record)

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        self._scalars("epoch", record, int(record.get("optimizer_steps") or record["epoch"]))
        self.writer.flush()  # an epoch is worth seeing now, not at the end
        self.inner.on_epoch_end(record)

    def on_checkpoint(self, info: dict[str, Any]) -> None:
        self.inner.on_checkpoint(info)

    def on_batch_size(self, info: dict[str, Any]) -> None:
        self.inner.on_batch_size(info)

    def close(self) -> None:
        self.writer.close()
