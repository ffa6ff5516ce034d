"""When to checkpoint: the spec's policy, as ``TrainingArguments`` words it."""

from __future__ import annotations

import time

from trainer_core.spec.job import JobSpec


class SavePolicy:
    """When to checkpoint, as ``TrainingArguments`` says it (``save_strategy`` "epoch", "steps" or
    "no", ``save_steps``), plus a save at the first window boundary after
    ``save_interval_seconds`` without one (unless "no"). Preemption and the end always save."""

    def __init__(self, spec: JobSpec) -> None:
        self.strategy, self.steps = spec.save_strategy, spec.save_steps
        self.interval = spec.save_interval_seconds
        self._last = time.monotonic()

    def _time_due(self) -> bool:
        return (
            self.strategy != "no"
            and self.interval > 0
            and time.monotonic() - self._last >= self.interval
        )

    def due(self, global_step: int, *, ends_epoch: bool, ends_run: bool) -> bool:
        """Whether a save is due after the window that made optimizer step ``global_step``: the
        end of the run always; then every ``save_steps`` steps, every epoch's last window, or
        the first window past the time interval, as the strategy says, wherever the window
        falls in its epoch."""
        steps_due = self.strategy == "steps" and global_step % self.steps == 0
        epoch_due = self.strategy == "epoch" and ends_epoch
        return ends_run or steps_due or epoch_due or self._time_due()

    def saved(self) -> None:
        self._last = time.monotonic()
