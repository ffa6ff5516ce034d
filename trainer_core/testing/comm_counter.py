"""Count DDP's gradient all-reduces with a communication hook (the tests and ``bench/ddp_comm.py``).

``observe_ddp(counter.attach)`` before training; every DDP model a backend builds then all-reduces
through ``counter``, which counts synchronised backward passes (``syncs``: the last bucket of
each), buckets and bytes, and otherwise does exactly what DDP's default hook does.

A sharded model (FSDP2) reduces each unit's gradients (a block's, the root's) in one call of its
``foreach_reduce``; ``counter.count_fsdp_reductions()`` counts those calls (``reductions``) by
wrapping it, for the tests only.
"""

# No ``from __future__ import annotations``: DDP checks the hook's annotations at run time.

import torch
import torch.distributed as dist
from torch.distributed import GradBucket  # type: ignore[attr-defined]  # public, re-exported from C++
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel


class CommCounter:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.models = 0
        self.syncs = 0
        self.buckets = 0
        self.bytes = 0
        self.reductions = 0

    def attach(self, model: DistributedDataParallel) -> None:
        self.models += 1
        model.register_comm_hook(None, self._hook)

    def _hook(
        self, process_group: dist.ProcessGroup, bucket: GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer()
        self.buckets += 1
        self.bytes += buffer.numel() * buffer.element_size()
        self.syncs += int(bucket.is_last())
        return default_hooks.allreduce_hook(process_group, bucket)

    def count_fsdp_reductions(self) -> None:
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group

        reduce = _fsdp_param_group.foreach_reduce  # type: ignore[attr-defined]

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.reductions += 1
            return reduce(*args, **kwargs)

        _fsdp_param_group.foreach_reduce = counted  # type: ignore[attr-defined]

    def counts(self) -> dict[str, int]:
        return {
            "models": self.models,
            "syncs": self.syncs,
            "buckets": self.buckets,
            "bytes": self.bytes,
            "reductions": self.reductions,
        }
