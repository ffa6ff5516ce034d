"""A host job over several ranks (a session made with ``user_metadata={"ranks": "N"}``): torchrun
starts N processes (``worker.child.ranks``); rank 0 is the host (``worker.tinker.host``: the
database, the leases, every answer), the others hold replicas of its training models and do what
rank 0 tells them, in the same order (one ``broadcast_object_list`` per command):

- each ``forward_backward`` is cut across the ranks (datum i to rank i mod N), each rank adds its
  share to its own window, and rank 0 gathers the outputs back into the call's order;
- ``optim_step`` sums the ranks' gradients and window counts before the update
  (``TrainingHost.optim_step``), so every replica takes the same step;
- a swap-out or a parking first collects the open window onto rank 0 (``TrainingHost.collect``),
  which writes the model whole; a swap-in gives every rank the weights and optimizer state, and
  rank 0 the open window.

Samplers, saves and exports are rank 0's alone (the replicas are equal). A rank that raises a
``ValueError`` raises it on every rank (the same check on the same data), and rank 0 answers it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer_core import distributed
from trainer_core.distributed import World, launched_world
from trainer_core.tinker_host.host import (
    Datum,
    Output,
    StepParams,
    TrainingHost,
    check_data,
)
from trainer_core.tinker_host.model import ModelChoice

log = logging.getLogger(__name__)
WAIT = timedelta(hours=6)
Spec = tuple[str, int, int, str, int]  # a model's source, rank, seed, optimizer, micro-batch


def join() -> World:
    """This process's place among the host job's ranks, the process group joined when there are
    several. The other ranks wait for rank 0's next command as long as it answers a sampler or
    writes an export alone: no collective timeout shorter than a long call (``WAIT``)."""
    world = launched_world()
    if world.distributed:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        distributed.join(world, device, timeout=WAIT)
    return world


def _tell(command: tuple[Any, ...]) -> tuple[Any, ...]:
    box: list[Any] = [command]
    dist.broadcast_object_list(box, src=0)
    return tuple(box[0])


def _spec(host: TrainingHost) -> Spec:
    choice = host.choice
    return (choice.source, choice.rank, choice.seed, host.family, host.micro_batch)


def _new(spec: Spec) -> TrainingHost:
    source, rank, seed, family, micro_batch = spec
    return TrainingHost(ModelChoice(source, rank=rank, seed=seed), family=family,
                        micro_batch=micro_batch)  # fmt: skip


def _share(
    host: TrainingHost, data: Sequence[Datum], loss: str, config: Mapping[str, Any], only: bool
) -> Output | None:
    """This rank's share of a call; rank 0 gets the whole call's output, in its order."""
    rank, size = host.world.rank, host.world.size
    mine = host.forward_backward(list(data[rank::size]), loss, config, forward_only=only)
    found: list[Any] | None = [None] * size if host.world.is_main else None
    dist.gather_object(mine, found, dst=0)
    if found is None:
        return None
    logprobs: list[Any] = [None] * len(data)
    total = 0.0
    for r, output in enumerate(found):
        logprobs[r::size] = output.logprobs
        total += output.metrics["loss:sum"]
    return Output(logprobs, {"loss:sum": total})


class Replicated:
    """Rank 0's training model: what it is asked, told to the other ranks first."""

    def __init__(self, model_id: str, host: TrainingHost) -> None:
        self.model_id, self.local = model_id, host
        _tell(("load", model_id, _spec(host)))

    def __getattr__(self, name: str) -> Any:  # saves, exports, the model: rank 0's own
        return getattr(self.local, name)

    def forward_backward(
        self, data: Sequence[Datum], loss: str, config: Mapping[str, Any], *, forward_only: bool
    ) -> Output:
        check_data(data, loss, config)  # refused here, before any rank starts on it
        _tell(("share", self.model_id, list(data), loss, dict(config), forward_only))
        output = _share(self.local, data, loss, config, forward_only)
        assert output is not None
        return output

    def optim_step(self, step: StepParams) -> dict[str, float]:
        _tell(("step", self.model_id, step))
        return self.local.optim_step(step)

    def restore(self, path: Path, *, optimizer: bool) -> None:
        _tell(("restore", self.model_id, str(path), optimizer))
        self.local.restore(path, optimizer=optimizer)

    def swap_out(self, path: Path) -> None:
        _tell(("swap_out", self.model_id))
        self.local.collect()
        self.local.swap_out(path)

    def swap_in(self, path: Path) -> None:
        _tell(("swap_in", self.model_id, _spec(self.local), str(path)))
        self.local.swap_in(path, unlink=False)
        dist.barrier()  # every rank has read it
        path.unlink(missing_ok=True)

    def drop(self) -> None:
        _tell(("drop", self.model_id))


def end() -> None:
    _tell(("end",))


def follow() -> None:
    """A rank above 0: hold replicas and do as rank 0 says until it says ``end``."""
    hosts: dict[str, TrainingHost] = {}
    while True:
        command = _tell(())
        kind, args = command[0], command[1:]
        if kind == "end":
            return
        try:
            _do(hosts, kind, args)
        except ValueError:  # raised on rank 0 too, which answers it
            continue


def _do(hosts: dict[str, TrainingHost], kind: str, args: tuple[Any, ...]) -> None:
    if kind == "load":
        hosts[args[0]] = _new(args[1])
    elif kind == "share":
        model_id, data, loss, config, only = args
        _share(hosts[model_id], data, loss, config, only)
    elif kind == "step":
        hosts[args[0]].optim_step(args[1])
    elif kind == "restore":
        hosts[args[0]].restore(Path(args[1]), optimizer=args[2])
    elif kind == "swap_out":
        hosts.pop(args[0]).collect()
    elif kind == "swap_in":
        model_id, spec, path = args
        host = hosts.get(model_id) or _new(spec)  # loaded just before, as on rank 0
        host.swap_in(Path(path), whole=False, unlink=False)
        hosts[model_id] = host
        dist.barrier()
    elif kind == "drop":
        hosts.pop(args[0], None)
    else:
        raise RuntimeError(f"unknown command {kind!r}")
