"""A callback that keeps what a run reports (step and epoch records), for tests and benches."""

from __future__ import annotations

from typing import Any

from trainer_core.spec.callbacks import TrainingCallback


class Recorder(TrainingCallback):
    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.epochs: list[dict[str, Any]] = []

    def on_step_metrics(self, record: dict[str, Any]) -> None:
        self.steps.append(record)

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        self.epochs.append(record)
