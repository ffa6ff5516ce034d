"""The epoch plan of ``trainer_core.accumulation.plan_epoch``, held as numpy arrays.

``plan_epoch`` builds a list of ``MicroBatch`` objects (a Python int per row); at millions of rows
that is hundreds of MB per epoch. ``EpochIndex`` keeps the permutation (8 bytes a row) and the
item count of each window, and makes micro-batch i when it is asked for. Its micro-batches equal
``plan_epoch``'s one for one (tests/trainer_core/test_data_cache.py checks it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import overload

import numpy as np
import torch

from trainer_core.accumulation import MicroBatch


def epoch_permutation(n_rows: int, seed: int, epoch: int) -> np.ndarray:
    """``accumulation.epoch_order`` as a numpy array (same generator, same seed)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n_rows, generator=generator).numpy()


class EpochIndex(Sequence[MicroBatch]):
    def __init__(
        self, order: np.ndarray, items: np.ndarray, batch_size: int, accumulation: int
    ) -> None:
        self.order, self.batch_size, self.accumulation = order, batch_size, accumulation
        self.n_micro = math.ceil(len(order) / batch_size)
        window_rows = batch_size * accumulation
        starts = np.arange(0, len(order), window_rows)
        ordered = items[order].astype(np.int64)
        self.window_items = np.add.reduceat(ordered, starts) if len(order) else ordered

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
        rows = self.order[index * b : (index + 1) * b].tolist()
        window = index // k
        last = index % k == k - 1 or index == self.n_micro - 1
        return MicroBatch(rows, window, int(self.window_items[window]), last)
