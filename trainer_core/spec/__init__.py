"""What the core's callers import: the job spec and its parts, the names of a run's outputs, how
the core reports (callbacks) and fails (errors). Torch-free, so the API validates specs with it;
``lint-imports`` keeps the API and the kernel to this subpackage of the core (and ``graders``).

The spec, in the order its field groups are read:
- ``job``: ``JobSpec``, the one contract between the layers, and ``example_spec``.
- ``spec_base``: the groups' base (unknown fields refused, values frozen).
- ``data_fields``: what to train on what, and how the data reads (columns, format).
- ``dpo``: method dpo's fields and a preference row's checks (and ``Method``).
- ``grpo``: method grpo's fields, the policy loss, a run's settings, what a reward returns.
- ``batch_fields``: processes, micro-batch, K, the effective batch; ``batching``: b x K x W = E.
- ``training_fields``: schedule, optimizer, precision, memory, adapters; ``lora`` their part.
- ``run_fields``: checkpoints, step records, evaluation, reporting.
- ``fields``: the value types, built-in names and checks they share; ``hints``: hints for
  unknown fields.

What a row or a source may be (the API checks uploads with them, the core the rows it trains):
- ``chat``: a dataset's format and a conversation's checks; ``tools``: function calling;
  ``prompts``: GRPO's prompt rows; ``graders``: OpenAI's grader objects.
- ``sources``: what a model or dataset value names; ``cards``: what a source's own files may
  make the libraries read.

How a run talks to its caller: ``outputs`` (the names of the files it writes), ``callbacks``,
``errors``, ``replan`` (a multi-process job's re-plan file).
"""

from __future__ import annotations

from trainer_core.spec.callbacks import TrainingCallback, TrainResult
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec, example_spec
from trainer_core.spec.lora import LoraSpec

__all__ = ["JobError", "JobSpec", "LoraSpec", "TrainResult", "TrainingCallback", "example_spec"]
