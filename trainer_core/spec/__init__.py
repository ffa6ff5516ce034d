"""What the core's callers import: the job spec and its parts, the names of a run's outputs, how
the core reports (callbacks) and fails (errors). Torch-free, so the API validates specs with it;
``lint-imports`` keeps the API and the kernel to this subpackage of the core.

- ``job``: ``JobSpec``, the one contract between the layers, and ``example_spec``.
- ``lora``: the spec's ``lora`` part. ``hints``: hints for unknown fields.
- ``sources``: what a model or dataset value names (built-in, uploaded file, local path, hub id).
- ``batching``: micro-batch x K x processes = effective batch, exactly.
- ``reinforcement``: the GRPO family's loss settings (``PolicyLoss``); ``bnpo`` refused.
- ``outputs``: the names of the files a run writes. ``callbacks``, ``errors``.
"""

from __future__ import annotations

from trainer_core.spec.callbacks import TrainingCallback, TrainResult
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec, example_spec
from trainer_core.spec.lora import LoraSpec

__all__ = ["JobError", "JobSpec", "LoraSpec", "TrainResult", "TrainingCallback", "example_spec"]
