"""A DataLoader whose items are whole micro-batches of the current epoch's plan.

The same loader feeds all three backends: the plain loop, Accelerate (``accelerator.prepare`` wraps
it and calls ``set_epoch``), and the Trainer (which calls ``set_epoch`` itself). Item i is
micro-batch i; the DataLoader adds no batching of its own (batch size 1, unwrapped by the collate).
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader, Dataset

from trainer_core.accumulation import MicroBatch, collate, epoch_order, plan_epoch
from trainer_core.data import TokenizedSplit


class EpochPlan(Dataset[dict[str, Any]]):
    def __init__(
        self, split: TokenizedSplit, *, batch_size: int, accumulation: int, seed: int, pad_id: int
    ) -> None:
        self.split = split
        self.batch_size = batch_size
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
        return collate(self.split.input_ids, self.split.labels, self.plan[index], self.pad_id)


def _unwrap(items: list[dict[str, Any]]) -> dict[str, Any]:
    return items[0]


class EpochLoader(DataLoader[dict[str, Any]]):
    """A DataLoader with ``set_epoch``, which the Trainer calls at the start of every epoch."""

    dataset: EpochPlan

    def __init__(self, plan: EpochPlan) -> None:
        super().__init__(plan, batch_size=1, shuffle=False, collate_fn=_unwrap, num_workers=0)

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
