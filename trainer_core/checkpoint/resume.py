"""The one owner of resume: what a checkpoint records of the run, and putting it all back at once.

A run saves, with the weights, the optimizer, the scheduler and the RNG states, a ``RunState``:
where it stood (epoch, micro-batches done in it, optimizer steps), the micro-batch and K in force,
the finished epochs' metrics and the partial epoch's loss sums. ``read_run_state`` reads it back
(refusing a checkpoint of another spec), ``restore`` loads every tensor state into the run being
built, and the run starts from the ``RunState`` (``trainer_core.loop``): nothing else reads a
checkpoint to resume. (The Trainer backend hands the folder to ``Trainer.train`` as well: its own
loop position is in ``trainer_state.json``.)
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from trainer_core.checkpoint.format import (
    OPTIMIZER,
    SCHEDULER,
    load_weights,
    read_state_json,
    restore_rng,
)
from trainer_core.checkpoint.sharded import is_sharded_checkpoint, load_shards
from trainer_core.model.sharding import is_sharded
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec

# Fields that change no result: a checkpoint of the same spec under other values still resumes.
SAVE_POLICY_FIELDS = {
    "save_strategy",
    "save_steps",
    "save_interval_seconds",
    "save_total_limit",
    "max_restarts",
}


# How the effective batch is laid out over processes and micro-batches: a checkpoint resumes under
# another layout of the same effective batch (``rescaled``), whose windows hold the same rows.
LAYOUT_FIELDS = {
    "num_processes",
    "num_machines",
    "sharding",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
}


def spec_fingerprint(spec: JobSpec) -> str:
    """Identifies the spec a checkpoint belongs to: resuming under another spec is refused.
    The checkpoint policy (and ``max_restarts``) is left out: it changes no result; so is the
    layout of the effective batch (processes, sharding, micro-batch and K)."""
    spec_json = spec.model_dump_json(exclude=SAVE_POLICY_FIELDS | LAYOUT_FIELDS)
    return hashlib.sha256(spec_json.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunState:
    """Where a run stands at a window boundary: ``gradacc_state.json`` of its checkpoint."""

    epoch: int  # the epoch in progress (or the next one, at an epoch's end)
    micro_step: int  # micro-batches of ``micro_batch_size`` rows done in that epoch
    global_step: int  # optimizer steps since the job began
    micro_batch_size: int
    gradient_accumulation_steps: int
    backend: str
    spec: str  # spec_fingerprint
    metrics: list[dict[str, Any]] = field(default_factory=list)  # the finished epochs' records
    loss_sum: float = 0.0  # the partial epoch's loss meter, summed over every rank
    loss_items: int = 0
    train_tokens: int = 0  # a dpo epoch's trained tokens so far (both completions of each pair)
    selection: dict[str, Any] | None = None  # best metric, its step, the patience counter
    evaluation: dict[str, Any] | None = None  # the last evaluation's step and scores
    world_size: int | None = None  # the processes that saved it (None: before it was recorded)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


def read_run_state(checkpoint_dir: Path, spec: JobSpec) -> RunState | None:
    """The state of the checkpoint in ``checkpoint_dir``, or None when there is none."""
    saved = read_state_json(checkpoint_dir)
    if saved is None:
        return None
    state = RunState.from_json(saved)
    if state.spec != spec_fingerprint(spec):
        raise JobError("output_dir holds a checkpoint of a different spec", param="output_dir")
    return state


def rescaled(state: RunState, world_size: int) -> RunState:
    """A checkpoint of W processes resumed on W': the same windows of b x K x W rows, each now
    K' = K x W / W' micro-batches of b rows a process (``micro_step`` counts the epoch's global
    micro-batches, b x W rows each)."""
    if state.world_size is None or state.world_size == world_size:
        return state
    b, k, w = state.micro_batch_size, state.gradient_accumulation_steps, state.world_size
    if (k * w) % world_size:
        raise JobError(
            f"num_processes: the checkpoint's windows are {b} x {k} x {w} processes; "
            f"{world_size} processes cannot share them evenly at micro-batch {b}",
            param="num_processes",
        )
    k_now = k * w // world_size
    windows_done = state.micro_step // k
    return replace(
        state,
        micro_step=windows_done * k_now,
        gradient_accumulation_steps=k_now,
        world_size=world_size,
    )


def restore(
    checkpoint_dir: Path,
    *,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    weights: bool = True,
) -> None:
    """Everything a checkpoint holds besides the ``RunState``, at once: weights, optimizer and
    scheduler state, and the RNG states (dropout and any other randomness continue exactly).
    ``weights=False``: the scheduler and RNG only, for a backend that shards the model itself
    and loads the rest once it has (``restore_weights``)."""
    if weights:
        restore_weights(checkpoint_dir, model, optimizer)
    scheduler.load_state_dict(torch.load(checkpoint_dir / SCHEDULER, weights_only=True))
    restore_rng(checkpoint_dir)


def restore_weights(
    checkpoint_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    """The model and optimizer state. A sharded checkpoint loads into any number of processes,
    sharded or not; a whole one into a model that is not sharded (any number of processes)."""
    if is_sharded_checkpoint(checkpoint_dir):
        load_shards(checkpoint_dir, model, optimizer)
    elif is_sharded(model):
        raise JobError(
            "sharding: the checkpoint holds the whole model (it was saved without sharding); "
            "resume it with sharding 'none'",
            param="sharding",
        )
    else:
        load_weights(checkpoint_dir, model)  # type: ignore[arg-type]
        optimizer.load_state_dict(torch.load(checkpoint_dir / OPTIMIZER, weights_only=True))
