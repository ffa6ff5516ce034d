"""The three backends behind one small Protocol.

The rule for a backend, as torchtune writes it for its recipes: the interface is not a vehicle for
code reuse. A backend holds only what differs between libraries: its forward/backward/step lines
and how its library decides that an optimizer window closes. The epoch loop, the loss meter, stop
requests, progress, evaluation and checkpoints belong to the run (``trainer_core.loop.run``); the
accumulation math (windows, item counts, normalisation) to ``trainer_core.accumulation``. Two
backends let the run drive them (``TrainingRun.drive``); the Trainer drives itself and calls the
run's hooks from its callbacks, and the run checks its windows against the plan all the same.
"""

from __future__ import annotations

from typing import Protocol

from trainer_core.loop.run import TrainingRun


class Backend(Protocol):
    def run(self, run: TrainingRun) -> None:
        """Train from the run's start position to the last epoch, calling its hooks."""


def get_backend(name: str) -> Backend:
    if name == "pytorch":
        from trainer_core.backends.pytorch import PlainLoop

        return PlainLoop()
    if name == "accelerate":
        from trainer_core.backends.accelerate import AccelerateLoop

        return AccelerateLoop()
    if name == "trainer":
        from trainer_core.backends.trainer import TrainerLoop

        return TrainerLoop()
    raise ValueError(f"unknown backend {name!r}")
