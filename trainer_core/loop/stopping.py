"""Stop requests from the caller, asked between micro-steps: a cancel ends the run at once (nothing
kept); a preemption is remembered and honoured at the next optimizer-step boundary (checkpoint)."""

from __future__ import annotations

from trainer_core.spec.callbacks import StopCheck, TrainingCancelled


class TrainingPreempted(Exception):
    """Raised after a checkpoint was saved because the caller asked to preempt."""


class StopRequests:
    """The caller's ``StopCheck``, asked by the run: raises on a cancel, remembers a preemption."""

    def __init__(self, should_stop: StopCheck) -> None:
        self.should_stop = should_stop
        self.preempt_requested = False

    def poll(self) -> None:
        """Raise ``TrainingCancelled`` on a cancel; remember a preemption for the window's end."""
        request = self.should_stop()
        if request == "cancel":
            raise TrainingCancelled
        if request == "preempt":
            self.preempt_requested = True
