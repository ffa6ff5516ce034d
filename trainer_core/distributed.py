"""Data parallelism across processes: who this process is, its share of each micro-batch, and the
few collectives a run needs besides the gradient all-reduce.

A job with ``num_processes`` W > 1 is started by a distributed launcher (``torchrun``, or
``accelerate launch``), which gives every process its RANK, WORLD_SIZE and LOCAL_RANK; gloo on
CPUs, NCCL on GPUs. Every rank builds the same epoch plan (a function of the seed and the epoch
only) with global micro-batches of b·W rows and windows of K of them, and trains on its own b
rows of each: window j still holds rows [j·b·K·W, (j+1)·b·K·W) of the permutation, so (b, K, W)
sees the windows of (b, K·W, 1) and of (b·W, K, 1).

N_W, the window's item count over all ranks, is in the plan every rank holds, so no collective
is needed for it. Each rank back-propagates Σ its item losses / (N_W / W): DDP *averages*
gradients over W ranks, so the average is Σ over all ranks / N_W, the global window mean.
Gradients are all-reduced once per window: DDP's ``no_sync`` (or Accelerate's ``accumulate``, or
the Trainer's ``accelerator.no_sync``) holds them back inside it.

Besides that one all-reduce, a rank communicates once per window to agree on a stop (a one-byte
all-reduce: all ranks must checkpoint at the same step, or the others hang in their next
all-reduce) and once per epoch (the train-loss sums and the evaluation, split over the ranks).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

# How long a rank waits for the others in a collective before failing instead of hanging.
COLLECTIVE_TIMEOUT = timedelta(minutes=10)
_STOP_CODES = {None: 0, "preempt": 1, "cancel": 2}


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0 reports metrics, writes checkpoints and the final model."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


SINGLE = World()


def launched_world() -> World:
    """What the launcher told this process (torchrun and ``accelerate launch`` set these)."""
    return World(
        rank=int(os.environ.get("RANK", "0")),
        size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )


def join(
    world: World, device: torch.device, *, timeout: timedelta = COLLECTIVE_TIMEOUT
) -> torch.device:
    """Join the process group (if the launcher's is not joined yet); the rank's device."""
    if device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=timeout)
    return device


def shard(rows: list[int], world: World) -> list[int]:
    """This rank's contiguous share of a global micro-batch, balanced to within one row. A rank
    whose share is empty (fewer rows than ranks, only in a ragged last micro-batch) gets []."""
    start = len(rows) * world.rank // world.size
    end = len(rows) * (world.rank + 1) // world.size
    return rows[start:end]


def collective_rows(rows: int, world: World, batch_size: int) -> int:
    """How far every rank steps through its share of ``rows`` in batches of ``batch_size``: the
    largest share's batches, so that each rank runs as many forwards (a sharded model's forward
    is a collective: a rank with a batch fewer would leave the others waiting)."""
    largest = -(-rows // world.size)
    return -(-largest // batch_size) * batch_size


# Called with each DDP model a backend trains (the bench and the tests count all-reduces with a
# communication hook on it); empty in production.
_ddp_observers: list[Callable[[DistributedDataParallel], None]] = []


def observe_ddp(observer: Callable[[DistributedDataParallel], None]) -> None:
    _ddp_observers.append(observer)


def ddp_ready(model: Any) -> None:
    """A backend hands over its DDP-wrapped model once it exists."""
    if isinstance(model, DistributedDataParallel):
        for observer in _ddp_observers:
            observer(model)


def wrap(model: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
    ids = [device.index] if device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=ids)
    ddp_ready(ddp)
    return ddp


def _collective_device() -> torch.device:
    """NCCL reduces CUDA tensors only; gloo CPU tensors."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def agree_on_stop(request: str | None, world: World) -> str | None:
    """The strongest stop any rank was asked for (cancel > preempt > none), on every rank."""
    if not world.distributed:
        return request
    code = torch.tensor([_STOP_CODES[request]], dtype=torch.int32, device=_collective_device())
    dist.all_reduce(code, op=dist.ReduceOp.MAX)
    return {v: k for k, v in _STOP_CODES.items()}[int(code.item())]  # host sync: once per window


def sum_over_ranks(values: list[float], world: World) -> list[float]:
    if not world.distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device())
    dist.all_reduce(tensor)
    return [float(v) for v in tensor.tolist()]


def min_over_ranks(value: int, world: World) -> int:
    """The smallest of every rank's value, on every rank (ranks must agree on a micro-batch)."""
    if not world.distributed:
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())


def gather_lists(values: list[Any], world: World) -> list[Any]:
    """Every rank's list, concatenated in rank order."""
    if not world.distributed:
        return values
    parts: list[list[Any]] = [[] for _ in range(world.size)]
    dist.all_gather_object(parts, values)
    return [v for part in parts for v in part]


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def leave(world: World) -> None:
    """Leave the process group at the end of a launched process (torch warns otherwise)."""
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()
