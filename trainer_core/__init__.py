"""gradacc's training core: exact gradient accumulation in three backends, for every method.

``run_job`` (``trainer_core.entry``) is a job's one entry, whatever its method; ``train`` is the
loop's. ``from trainer_core import run_job, train`` imports torch lazily, so importing the package
(or its spec, or its graders) stays cheap for the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer_core.spec.callbacks import TrainingCallback, TrainResult
from trainer_core.spec.job import JobSpec

if TYPE_CHECKING:
    from trainer_core.entry import run_job
    from trainer_core.train import train

__all__ = ["JobSpec", "TrainResult", "TrainingCallback", "run_job", "train"]


def __getattr__(name: str) -> Any:
    if name == "train":
        from trainer_core.train import train

        return train
    if name == "run_job":
        from trainer_core.entry import run_job

        return run_job
    raise AttributeError(name)
