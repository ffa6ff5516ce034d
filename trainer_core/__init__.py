"""gradacc's training core: exact gradient accumulation in three backends.

``from trainer_core import train`` imports torch lazily, so importing the package (or its spec)
stays cheap for the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer_core.spec.callbacks import TrainingCallback, TrainResult
from trainer_core.spec.job import JobSpec

if TYPE_CHECKING:
    from trainer_core.train import train

__all__ = ["JobSpec", "TrainResult", "TrainingCallback", "train"]


def __getattr__(name: str) -> Any:
    if name == "train":
        from trainer_core.train import train

        return train
    raise AttributeError(name)
