"""A DataLoader whose items are whole micro-batches of the current epoch's plan.

The same loader feeds all three backends: the plain loop, Accelerate (``accelerator.prepare`` wraps
it and calls ``set_epoch``), and the Trainer (which calls ``set_epoch`` itself). Item i is
micro-batch i; the DataLoader adds no batching of its own (batch size 1, unwrapped by the collate).

By default (``loader_workers`` 0) batches are built on the training thread. With workers, they
are built off it, in DataLoader worker processes that live as long as the loader
(``persistent_workers``: no fork per epoch). A worker holds a copy of the plan from the time it
started, so the key it is handed names the micro-batch completely: ``(epoch, index in the full
epoch plan)``. The worker plans that epoch itself (a function of seed and epoch only) and returns
the same micro-batch the training process would have built: the plan, and exactness, do not
depend on who builds the batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from trainer_core.accumulation import IGNORE_INDEX, MicroBatch, collate
from trainer_core.data.packing import Layout, pack
from trainer_core.data.plan import EpochIndex, epoch_permutation
from trainer_core.data.splits import TokenizedSplit
from trainer_core.data.tokenized import IntColumn, row_lengths
from trainer_core.distributed import SINGLE, World

PlanKey = tuple[int, int]  # (epoch, micro-batch index in the epoch's full plan)


@dataclass(frozen=True)
class Planned:
    """What every epoch plan is cut by, whatever its unit: b and K in force, the seed, the
    padding, the ranks, and whether each window's rows are ordered by length."""

    batch_size: int
    accumulation: int
    seed: int
    pad_id: int
    world: World = SINGLE
    group_by_length: bool = False

    def kwargs(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in fields(self)}


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
        group_by_length: bool = False,
        packing: Layout | None = None,
    ) -> None:
        self.split = split
        self.packing = packing  # each micro-batch's rows end to end (data.packing), or padded
        # Row lengths, for ordering each window's rows longest first (data.plan).
        self._lengths = row_lengths(split.input_ids) if group_by_length or packing else None
        self.world = world
        # The plan's micro-batches are global: b rows for each of the W ranks (distributed.py).
        self.batch_size = batch_size * world.size
        self.accumulation = accumulation
        self.seed = seed
        self.pad_id = pad_id
        items = split.items.array if isinstance(split.items, IntColumn) else split.items
        self._items = np.asarray(items, dtype=np.int64)
        self._full: tuple[int, EpochIndex] | None = None  # the last epoch planned here
        self._counts: tuple[EpochIndex, dict[str, np.ndarray]] | None = None  # its window sums
        self.epoch, self.skip = -1, 0
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
        self.full_plan(epoch)
        self.epoch, self.skip = epoch, skip

    def full_plan(self, epoch: int) -> EpochIndex:
        if self._full is None or self._full[0] != epoch:
            order = epoch_permutation(len(self.split), self.seed, epoch)
            index = EpochIndex(
                order,
                self._items,
                self.batch_size,
                self.accumulation,
                self._lengths,
                packed=self.packing is not None,
                ranks=self.world.size,
            )
            self._full = (epoch, index)
        return self._full[1]

    def __len__(self) -> int:
        return len(self.full_plan(self.epoch)) - self.skip

    def __getitem__(self, key: int | PlanKey) -> dict[str, Any]:
        """Micro-batch ``key``: this rank's share of its rows, with its window's counts. The one
        place a rank's share and the counts' ÷W are made, for every method's plan."""
        epoch, index = key if isinstance(key, tuple) else (self.epoch, self.skip + key)
        plan = self.full_plan(epoch)
        micro = plan[index]
        rows = plan.share(index, self.world) if self.world.distributed else micro.rows
        # A rank with no rows in a ragged last micro-batch still joins the window's all-reduce:
        # it runs a stand-in row of weight 0 with every label ignored (a backward adding zero).
        batch = self.collate_rows(rows or micro.rows[:1], micro)
        if not rows:
            self.stand_in(batch)
        counts = {"n_window_items": micro.n_window_items}
        counts |= {key: int(sums[micro.window]) for key, sums in self._window_counts(plan).items()}
        # Σ own / (N / W) on each rank: DDP averages over the W ranks, giving Σ all / N.
        batch |= {key: count / self.world.size for key, count in counts.items()}
        batch["last_in_window"] = micro.last_in_window
        return batch

    def collate_rows(self, rows: list[int], micro: MicroBatch) -> dict[str, Any]:
        """The micro-batch of ``rows`` (a method's plan collates its own columns)."""
        split = self.split
        own = MicroBatch(rows, micro.window, micro.n_window_items, micro.last_in_window)
        batch = collate(split.input_ids, split.labels, own, self.pad_id, split.loss_mask)
        if self.packing is None:
            return batch
        assert self._full is not None  # planned by __getitem__: the micro-batch's own epoch
        widths = self._full[1].window_width  # its window's longest row
        return pack(batch, self.packing, None if widths is None else int(widths[micro.window]))

    def stand_in(self, batch: dict[str, Any]) -> None:
        """A rank's stand-in row trains nothing: every label ignored, no item counted (a
        method's plan zeroes its own weights too)."""
        batch["labels"] = torch.full_like(batch["labels"], IGNORE_INDEX)
        batch["n_items"], batch["n_rows"] = 0, 0

    def window_columns(self) -> dict[str, np.ndarray]:
        """Per-row counts whose window sums a micro-batch carries besides N_W, by batch key: a
        method's second normaliser (none for SFT)."""
        return {}

    def _window_counts(self, plan: EpochIndex) -> dict[str, np.ndarray]:
        if self._counts is None or self._counts[0] is not plan:  # once per planned epoch
            columns = self.window_columns().items()
            self._counts = (plan, {key: plan.window_sums(per_row) for key, per_row in columns})
        return self._counts[1]


class PlanKeys(Sampler[PlanKey]):
    """The keys of the current epoch's remaining micro-batches, read when iteration starts (after
    ``set_epoch``), so a worker started in an earlier epoch still builds the right batch."""

    def __init__(self, plan: EpochPlan) -> None:
        self.plan = plan

    def __len__(self) -> int:
        return len(self.plan)

    def __iter__(self) -> Iterator[PlanKey]:
        plan = self.plan
        for i in range(len(plan)):
            yield (plan.epoch, plan.skip + i)


def _unwrap(items: list[dict[str, Any]]) -> dict[str, Any]:
    return items[0]


class EpochLoader(DataLoader[dict[str, Any]]):
    """A DataLoader with ``set_epoch``, which the Trainer calls at the start of every epoch.

    ``num_workers`` 0 (the default) builds batches on the training thread; ``pin_memory`` on CUDA
    lets the copy to the GPU overlap the compute (the backends copy with ``non_blocking``)."""

    dataset: EpochPlan

    def __init__(self, plan: EpochPlan, *, num_workers: int = 0, pin_memory: bool = False) -> None:
        super().__init__(
            plan,
            batch_size=1,
            sampler=PlanKeys(plan),
            collate_fn=_unwrap,
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=num_workers > 0,
            prefetch_factor=4 if num_workers > 0 else None,
        )

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
