"""Micro-batches of preference pairs, and the epoch plan whose row is the pair.

The plan is the one every job uses (``data.plan``: a seeded permutation cut into micro-batches
of b rows and windows of K), with the pair as its row: b, K and the effective batch count pairs,
a rank's share of a micro-batch is whole pairs (``distributed.shard`` splits rows), and an
out-of-memory re-plan halves b in pairs. No plan can put a pair's two completions in different
micro-batches, and ``accumulation.check_pairs_whole`` refuses a batch that holds them apart.

A micro-batch of B pairs is one forward of 2B sequences: the chosen ones, then the rejected ones
in the same order. It carries N_W (the window's pairs) and T_W (the window's chosen trained
tokens, for the RPO term), each divided by W under DDP (``accumulation``, "Pairs").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trainer_core.accumulation import IGNORE_INDEX, MicroBatch, collate
from trainer_core.data.load import PreferenceSplit
from trainer_core.data.loader import EpochPlan
from trainer_core.data.plan import EpochIndex
from trainer_core.data.tokenized import IntColumn, row_lengths
from trainer_core.distributed import shard


def collate_pairs(
    split: PreferenceSplit,
    rows: list[int],
    pad_id: int,
    reference: np.ndarray | None = None,
) -> dict[str, Any]:
    """The 2B sequences of the pairs ``rows``, right-padded, with what each trains."""
    sequences = [split.input_ids[r] for r in rows] + [split.rejected_ids[r] for r in rows]
    assert split.loss_mask is not None
    masks = [split.loss_mask[r] for r in rows] + [split.rejected_mask[r] for r in rows]
    everything = MicroBatch(list(range(len(sequences))), 0, 0, True)
    batch = collate(sequences, None, everything, pad_id, masks)
    batch |= {
        "pair_ids": torch.tensor(rows + rows, dtype=torch.long),
        "pair_weight": torch.ones(len(rows)),
        "n_items": len(rows),  # the meters count pairs
        "n_rows": len(rows),
        # Trained tokens of both completions after the shift (``collate``'s item count): what
        # an epoch record reports as ``train_tokens``, the same count as SFT's trained tokens.
        "n_train_tokens": batch["n_items"],
    }
    if reference is not None:  # cached: (pairs, 2) float32, chosen then rejected
        both = np.concatenate([reference[rows, 0], reference[rows, 1]])
        batch["ref_logps"] = torch.from_numpy(both.astype(np.float32))
    return batch


class PreferencePlan(EpochPlan):
    """``EpochPlan`` over pairs: the same windows, batches of pairs (``collate_pairs``)."""

    split: PreferenceSplit

    def __init__(
        self, split: PreferenceSplit, *, reference: np.ndarray | None = None, **plan: Any
    ) -> None:
        self.reference = reference  # None: the reference runs online, at each micro-step
        tokens = split.chosen_items
        self._tokens = np.asarray(tokens.array if isinstance(tokens, IntColumn) else tokens,
                                  dtype=np.int64)  # fmt: skip
        self._window_tokens: tuple[int, np.ndarray] | None = None
        super().__init__(split, **plan)
        if self._lengths is not None:  # group a window's pairs by their longer completion
            self._lengths = np.maximum(self._lengths, row_lengths(split.rejected_ids))
            self._full, self.epoch = None, -1
            self.set_epoch(0)

    def window_tokens(self, epoch: int, window: int) -> int:
        """T_W: the chosen completions' trained tokens of the window, over every rank."""
        if self._window_tokens is None or self._window_tokens[0] != epoch:
            index: EpochIndex = self.full_plan(epoch)
            starts = np.arange(0, len(index.order), self.batch_size * self.accumulation)
            ordered = self._tokens[index.order]
            sums = np.add.reduceat(ordered, starts) if len(ordered) else ordered
            self._window_tokens = (epoch, sums)
        return int(self._window_tokens[1][window])

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, Any]:
        epoch, index = key if isinstance(key, tuple) else (self.epoch, self.skip + key)
        micro = self.full_plan(epoch)[index]
        rows = shard(micro.rows, self.world) if self.world.distributed else micro.rows
        # A rank with no pairs in a ragged last micro-batch still joins the window's all-reduce:
        # it runs a stand-in pair of weight 0, every label ignored (a backward that adds zero).
        batch = collate_pairs(self.split, rows or micro.rows[:1], self.pad_id, self.reference)
        if not rows:
            batch["labels"] = torch.full_like(batch["labels"], IGNORE_INDEX)
            batch["pair_weight"] = torch.zeros_like(batch["pair_weight"])
            batch["n_items"], batch["n_rows"], batch["n_train_tokens"] = 0, 0, 0
        # DDP averages over the W ranks: Σ own / (N_W / W) averages to Σ all / N_W.
        size = self.world.size
        batch["n_window_items"] = micro.n_window_items / size
        batch["n_window_tokens"] = self.window_tokens(epoch, micro.window) / size
        batch["last_in_window"] = micro.last_in_window
        return batch
