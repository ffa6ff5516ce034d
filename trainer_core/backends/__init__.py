"""The three backends behind one small Protocol. Each is an adapter around the shared math in
``trainer_core.accumulation`` and the shared run state in ``trainer_core.session``."""

from __future__ import annotations

from typing import Protocol

from trainer_core.session import RunSession


class Backend(Protocol):
    def run(self, session: RunSession) -> None:
        """Train from the session's start position to the last epoch, calling its hooks."""


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
