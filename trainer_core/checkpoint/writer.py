"""Checkpoints that do not stall training: copy the state off the device, write it in the background.

The training thread pays only for ``snapshot`` (a copy of the weights, the optimizer's state and the
RNG states to CPU memory, so the next optimizer step cannot change what is being written); a
background thread writes the files in the layout of ``trainer_core.checkpoint.format`` and swaps
them in by rename. At most one write is in flight: a save waits for the previous one first, so checkpoints
land in order and memory holds at most two snapshots. A ``kill -9`` during a write leaves only a
``.tmp`` folder, and the previous checkpoint is the one a resume reads; one during the swap is
finished by ``format.recover_interrupted_swap``.

Keep the last N (``save_total_limit``): the newest is always ``checkpoint/`` (what a resume and
the Trainer read); older ones are renamed ``checkpoint-<global step>/`` and pruned beyond N.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file
from transformers import PreTrainedModel

from trainer_core.checkpoint.format import (
    CONFIG,
    OPTIMIZER,
    RNG,
    SCHEDULER,
    TRAINER_STATE,
    WEIGHTS,
    discard,
    kept_at,
    recover_interrupted_swap,
    rng_state,
)
from trainer_core.checkpoint.sharded import save_shards
from trainer_core.distributed import World, barrier
from trainer_core.model.quantized import frozen_4bit_keys
from trainer_core.spec.outputs import CHECKPOINT_STATE, step_of

if TYPE_CHECKING:
    from transformers import TrainerState

WRITER_NICE = 19  # the writer thread's scheduling niceness (Linux: a thread has its own)


def yield_to_training() -> None:
    """Lower this (the writer) thread's CPU priority, so that when the cores are all busy the
    training threads run first and the write fills the gaps. On a 2-core CPU box the write shared
    the cores with the next epoch and cost it ~4 % (bench/real_size.py). Where a thread's
    priority cannot be set (another OS, a sandbox), the write simply runs as before."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICE)


class Staging:
    """CPU buffers reused from save to save. A fresh allocation of the whole state every save
    costs page faults (and on CUDA an unpinned copy); reusing the buffers makes the copy a memcpy.
    Only valid while no write reads them: the writer waits for the previous write first."""

    def __init__(self) -> None:
        self.buffers: dict[str, torch.Tensor] = {}

    def copy(self, key: str, tensor: torch.Tensor) -> torch.Tensor:
        buffer = self.buffers.get(key)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            pin = tensor.is_cuda  # pinned: the device-to-host copy can run asynchronously
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=pin)
            self.buffers[key] = buffer
        buffer.copy_(tensor.detach(), non_blocking=tensor.is_cuda)
        return buffer

    def tree(self, prefix: str, value: Any) -> Any:
        """A deep copy of ``value`` in which every tensor lives in a staging buffer."""
        if isinstance(value, torch.Tensor):
            return self.copy(prefix, value)
        if isinstance(value, dict):
            return {k: self.tree(f"{prefix}/{k}", v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.tree(f"{prefix}/{i}", v) for i, v in enumerate(value))
        return value


@dataclass(frozen=True)
class Snapshot:
    weights: dict[str, torch.Tensor]
    config_json: str
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, Any]
    trainer_state: TrainerState
    state: dict[str, Any]


def snapshot(
    *,
    staging: Staging,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    trainer_state: TrainerState,
    state: dict[str, Any],
) -> Snapshot:
    weights: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    frozen = frozen_4bit_keys(model)  # a 4-bit base's: made again from the base on resume
    for name, tensor in model.state_dict().items():
        # Tied weights (GPT-2's lm_head = wte) are stored once, as save_pretrained does.
        if tensor.data_ptr() in seen or name in frozen:
            continue
        seen.add(tensor.data_ptr())
        weights[name] = staging.copy(f"model/{name}", tensor)
    optimizer_state = staging.tree("optimizer", optimizer.state_dict())
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # the non-blocking device-to-host copies have landed
    return Snapshot(
        weights=weights,
        config_json=model.config.to_json_string(),
        optimizer=optimizer_state,
        scheduler=copy.deepcopy(scheduler.state_dict()),
        rng=rng_state(),
        trainer_state=trainer_state,
        state=json.loads(json.dumps(state)),  # frozen now: the run keeps appending metrics
    )


def write_files(folder: Path, snap: Snapshot) -> None:
    save_file(snap.weights, str(folder / WEIGHTS), metadata={"format": "pt"})
    (folder / CONFIG).write_text(snap.config_json)
    torch.save(snap.optimizer, folder / OPTIMIZER)
    torch.save(snap.scheduler, folder / SCHEDULER)
    torch.save(snap.rng, folder / RNG)
    snap.trainer_state.save_to_json(str(folder / TRAINER_STATE))
    (folder / CHECKPOINT_STATE).write_text(json.dumps(snap.state))  # last: marks it complete


def install(path: Path, snap: Snapshot, keep: int, keep_step: int | None = None) -> None:
    """Write ``snap`` beside ``path`` and swap it in by rename; keep ``keep`` checkpoints, and
    ``keep_step``'s (the best) beyond them."""
    tmp = fresh_folder(path)
    write_files(tmp, snap)
    swap_in(path, tmp, keep, keep_step)


def fresh_folder(path: Path) -> Path:
    """The empty folder a new checkpoint is written in, beside ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # what a killed write left behind
    recover_interrupted_swap(path)  # and a killed swap
    tmp.mkdir(parents=True)
    return tmp


def swap_in(path: Path, tmp: Path, keep: int, keep_step: int | None) -> None:
    """``tmp`` (complete) becomes ``path``; the one it replaces is kept or pruned."""
    old = path.with_name(path.name + ".old")
    if path.exists():
        path.rename(old)  # a crash from here on: recover_interrupted_swap finishes the swap
    tmp.rename(path)
    if old.exists():
        if keep > 1 or (keep_step is not None and step_of(old) == keep_step):
            old.rename(kept_at(path, step_of(old)))
        else:
            discard(old)
    older = sorted(path.parent.glob(f"{path.name}-*"), key=step_of, reverse=True)
    for stale in older[max(keep - 1, 0) :]:
        if keep_step is None or step_of(stale) != keep_step:
            discard(stale)


class CheckpointWriter:
    """Writes snapshots to ``path`` in a background thread.

    ``collect`` hands back the ``info`` of each save once it is on disk, so the caller reports a
    checkpoint only when a resume could use it."""

    def __init__(self, path: Path, *, keep: int = 1) -> None:
        self.path, self.keep = path, keep
        self._thread: threading.Thread | None = None
        self._pending: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._staging = Staging()
        self.stalls: list[float] = []  # seconds the training thread was blocked, per save

    def save(
        self, info: dict[str, Any], *, keep_step: int | None = None, **parts: Any
    ) -> list[dict[str, Any]]:
        """Start writing; returns the infos of saves that completed meanwhile. ``keep_step``'s
        checkpoint is kept beyond ``keep``."""
        started = time.perf_counter()
        # One write in flight (checkpoints land in order), and the staging buffers are free.
        done = self.collect(block=True)
        snap = snapshot(staging=self._staging, **parts)
        self._pending = info
        self._thread = threading.Thread(
            target=self._write, args=(snap, keep_step), name="checkpoint"
        )
        self._thread.start()
        self.stalls.append(time.perf_counter() - started)
        return done

    def save_sharded(
        self,
        info: dict[str, Any],
        *,
        world: World,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        trainer_state: TrainerState,
        state: dict[str, Any],
        keep_step: int | None = None,
    ) -> list[dict[str, Any]]:
        """A sharded model's checkpoint, by every rank at once and before training goes on (a
        collective): each rank writes its shards into the new folder, then rank 0 the rest
        (``gradacc_state.json`` last) and swaps it in. Returns the info on rank 0."""
        started = time.perf_counter()
        tmp = self.path.with_name(self.path.name + ".tmp")
        if world.is_main:
            tmp = fresh_folder(self.path)
        barrier(world)  # the folder exists, empty, for every rank
        save_shards(tmp, model, optimizer)
        barrier(world)  # every rank's shards are written
        if world.is_main:
            config: Any = model.config
            (tmp / CONFIG).write_text(config.to_json_string())
            torch.save(scheduler.state_dict(), tmp / SCHEDULER)
            torch.save(rng_state(), tmp / RNG)
            trainer_state.save_to_json(str(tmp / TRAINER_STATE))
            (tmp / CHECKPOINT_STATE).write_text(json.dumps(state))  # last: marks it complete
            swap_in(self.path, tmp, self.keep, keep_step)
        self.stalls.append(time.perf_counter() - started)
        return [info] if world.is_main else []

    def _write(self, snap: Snapshot, keep_step: int | None) -> None:
        yield_to_training()
        try:
            install(self.path, snap, self.keep, keep_step)
        except BaseException as exc:  # handed to the training thread when it collects
            self._error = exc

    def collect(self, *, block: bool) -> list[dict[str, Any]]:
        """The info of the save in flight if it is on disk (waiting for it when ``block``);
        raises what the write failed with."""
        if self._thread is not None:
            if not block and self._thread.is_alive():
                return []
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error, self._pending = self._error, None, None
            raise error
        done, self._pending = self._pending, None
        return [done] if done is not None else []
