"""A DataLoader whose items are whole micro-batches of the current epoch's plan.

The same loader feeds all three backends: the plain loop, Accelerate (``accelerator.prepare`` wraps
it and calls ``set_epoch``), and the Trainer (which calls ``set_epoch`` itself). Item i is
micro-batch i; the DataLoader adds no batching of its own (batch size 1, unwrapped by the collate).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from trainer_core.accumulation import IGNORE_INDEX, MicroBatch, collate, epoch_order, plan_epoch
from trainer_core.data import TokenizedSplit
from trainer_core.distributed import SINGLE, World, shard


class EpochPlan(Dataset[dict[str, Any]]):
    def __init__(
        self,
        split: TokenizedSplit,
        *,
        batch_size: int,
        accumulation: int,
        seed: int,
        pad_id: int,
        world: World = SINGLE,
    ) -> None:
        self.split = split
        self.world = world
        # The plan's micro-batches are global: b rows for each of the W ranks (distributed.py).
        self.batch_size = batch_size * world.size
        self.accumulation = accumulation
        self.seed = seed
        self.pad_id = pad_id
        self.epoch = -1
        self.plan: list[MicroBatch] = []
        self._resume: tuple[int, int] | None = None
        self.set_epoch(0)

    def resume_at(self, epoch: int, skip: int) -> None:
        """The next ``set_epoch(epoch)`` drops the first ``skip`` micro-batches (a resume).

        Kept pending rather than applied, because wrappers (Accelerate's DataLoaderShard) call
        ``set_epoch`` again on every ``iter()``; the skip must survive that call."""
        if skip % self.accumulation:
            raise ValueError("resume must start at an optimizer-window boundary")
        self._resume = (epoch, skip)

    def set_epoch(self, epoch: int) -> None:
        skip = 0
        if self._resume is not None and self._resume[0] == epoch:
            skip, self._resume = self._resume[1], None
        elif epoch == self.epoch:
            return  # already planned (possibly with a resume skip): keep it
        order = epoch_order(len(self.split), self.seed, epoch)
        plan = plan_epoch(order, self.split.items, self.batch_size, self.accumulation)
        self.epoch, self.plan = epoch, plan[skip:]

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, index: int) -> dict[str, Any]:
        micro = self.plan[index]
        if not self.world.distributed:
            return collate(self.split.input_ids, self.split.labels, micro, self.pad_id)
        return self._rank_share(micro)

    def _rank_share(self, micro: MicroBatch) -> dict[str, Any]:
        rows = shard(micro.rows, self.world)
        # A rank with no rows in a ragged last micro-batch still joins the window's all-reduce:
        # it runs one row with every label ignored, a backward that adds exactly zero.
        own = MicroBatch(rows or micro.rows[:1], micro.window, micro.n_window_items,
                         micro.last_in_window)  # fmt: skip
        batch = collate(self.split.input_ids, self.split.labels, own, self.pad_id)
        if not rows:
            batch["labels"] = torch.full_like(batch["labels"], IGNORE_INDEX)
            batch["n_items"], batch["n_rows"] = 0, 0
        # Σ own item losses / (N_W / W): DDP averages over the W ranks, giving Σ all / N_W.
        batch["n_window_items"] = micro.n_window_items / self.world.size
        return batch


def _unwrap(items: list[dict[str, Any]]) -> dict[str, Any]:
    return items[0]


class EpochLoader(DataLoader[dict[str, Any]]):
    """A DataLoader with ``set_epoch``, which the Trainer calls at the start of every epoch."""

    dataset: EpochPlan

    def __init__(self, plan: EpochPlan) -> None:
        super().__init__(plan, batch_size=1, shuffle=False, collate_fn=_unwrap, num_workers=0)

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
