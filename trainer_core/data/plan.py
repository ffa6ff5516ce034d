"""The epoch plan, written once: which rows make each micro-batch and each optimizer window.

An epoch is a seeded permutation of the training rows (a function of (seed, epoch) only, never of
b or K), cut into micro-batches of ``b`` rows, grouped into windows of ``K`` micro-batches (the
last window of an epoch may hold fewer). So (b, K) and (b·K, 1) see the same windows:
ceil(ceil(n/b)/K) == ceil(n/(b·K)), and window j holds rows [j·b·K, (j+1)·b·K) of the permutation.
Each micro-batch carries its window's item count N_W (``trainer_core.accumulation``). With
``group_by_length`` each window's rows are ordered longest first before the window is cut into
micro-batches: the same rows per window, less padding.

``EpochIndex`` keeps the permutation (8 bytes a row) and the item count of each window as numpy
arrays, and makes micro-batch i when it is asked for: a list of ``MicroBatch`` objects would cost
hundreds of MB per epoch at millions of rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import overload

import numpy as np
import torch

from trainer_core.accumulation import MicroBatch
from trainer_core.data.pack_plan import packed_windows
from trainer_core.distributed import World, shard


def micro_batches_per_epoch(n_rows: int, batch_size: int) -> int:
    return math.ceil(n_rows / batch_size)


def optimizer_steps_per_epoch(n_rows: int, batch_size: int, accumulation: int) -> int:
    """ceil(ceil(n/b)/K) = ceil(n/(b·K)): the same for every (b, K) of one effective batch."""
    return math.ceil(micro_batches_per_epoch(n_rows, batch_size) / accumulation)


def epoch_permutation(n_rows: int, seed: int, epoch: int) -> np.ndarray:
    """The rows of one epoch in training order; a function of (seed, epoch) only."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n_rows, generator=generator).numpy()


def group_windows_by_length(order: np.ndarray, lengths: np.ndarray, window_rows: int) -> np.ndarray:
    """Each window's rows, longest first (ties in permutation order); the windows themselves and
    their rows stay as they were. A window's gradient is the sum over its rows divided by N_W,
    whatever micro-batches its rows are cut into, so this changes no update: it only puts rows
    of similar length in one micro-batch, which pads less (``group_by_length``)."""
    window_of = np.arange(len(order)) // window_rows
    return order[np.lexsort((-lengths[order], window_of))]


class EpochIndex(Sequence[MicroBatch]):
    def __init__(
        self,
        order: np.ndarray,
        items: np.ndarray,
        batch_size: int,
        accumulation: int,
        lengths: np.ndarray | None = None,
        packed: bool = False,
        ranks: int = 1,
    ) -> None:
        window_rows = batch_size * accumulation
        self.ranks = ranks  # packed: each micro-batch is cut into ranks' shares by the plan
        self.bounds: np.ndarray | None = None  # the shares' starts, when rows are packed
        if lengths is not None and packed:  # rows regrouped within each window (pack_plan)
            order, self.bounds = packed_windows(order, lengths, batch_size, accumulation, ranks)
        elif lengths is not None:
            order = group_windows_by_length(order, lengths, window_rows)
        self.order, self.batch_size, self.accumulation = order, batch_size, accumulation
        self.n_micro = micro_batches_per_epoch(len(order), batch_size)
        self._starts = np.arange(0, len(order), window_rows)  # each window's first row
        self.window_items = self.window_sums(items)
        self.window_width = (  # each window's longest row: the width its rows are packed to
            np.maximum.reduceat(lengths[order], self._starts)
            if packed and lengths is not None and len(order)
            else None
        )

    def window_sums(self, per_row: np.ndarray) -> np.ndarray:
        """Each window's sum of a per-row count (indexed by row), over every rank: the one
        place a window's counts are made (its items N_W, and a method's second normaliser)."""
        ordered = per_row[self.order].astype(np.int64)
        return np.add.reduceat(ordered, self._starts) if len(ordered) else ordered

    def __len__(self) -> int:
        return self.n_micro

    @overload
    def __getitem__(self, index: int) -> MicroBatch: ...
    @overload
    def __getitem__(self, index: slice) -> list[MicroBatch]: ...
    def __getitem__(self, index: int | slice) -> MicroBatch | list[MicroBatch]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.n_micro))]
        if index < 0:
            index += self.n_micro
        if not 0 <= index < self.n_micro:
            raise IndexError(index)
        b, k = self.batch_size, self.accumulation
        if self.bounds is None:
            rows = self.order[index * b : (index + 1) * b].tolist()
        else:
            w = self.ranks
            rows = self.order[self.bounds[index * w] : self.bounds[(index + 1) * w]].tolist()
        window = index // k
        last = index % k == k - 1 or index == self.n_micro - 1
        return MicroBatch(rows, window, int(self.window_items[window]), last)

    def share(self, index: int, world: World) -> list[int]:
        """This rank's rows of micro-batch ``index``: packed, the whole bins the plan dealt it
        (ranks of like load); else a contiguous share of the rows (``distributed.shard``)."""
        if self.bounds is None:
            return shard(self[index].rows, world)
        assert self.ranks == world.size, "planned for another world size"
        part = index * self.ranks + world.rank
        rows: list[int] = self.order[self.bounds[part] : self.bounds[part + 1]].tolist()
        return rows
