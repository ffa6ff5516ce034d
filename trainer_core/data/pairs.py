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

from trainer_core.accumulation import MicroBatch, collate
from trainer_core.data.load import PreferenceSplit
from trainer_core.data.loader import EpochPlan
from trainer_core.data.tokenized import IntColumn, row_lengths


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
    """``EpochPlan`` over pairs: the same windows, batches of pairs (``collate_pairs``), and
    besides N_W (the window's pairs) T_W, its chosen trained tokens (the RPO term's count)."""

    split: PreferenceSplit

    def __init__(
        self, split: PreferenceSplit, *, reference: np.ndarray | None = None, **plan: Any
    ) -> None:
        self.reference = reference  # None: the reference runs online, at each micro-step
        tokens = split.chosen_items
        self._tokens = np.asarray(tokens.array if isinstance(tokens, IntColumn) else tokens,
                                  dtype=np.int64)  # fmt: skip
        super().__init__(split, **plan)
        if self._lengths is not None:  # group a window's pairs by their longer completion
            self._lengths = np.maximum(self._lengths, row_lengths(split.rejected_ids))
            self._full, self.epoch = None, -1
            self.set_epoch(0)

    def window_columns(self) -> dict[str, np.ndarray]:
        return {"n_window_tokens": self._tokens}

    def collate_rows(self, rows: list[int], micro: MicroBatch) -> dict[str, Any]:
        return collate_pairs(self.split, rows, self.pad_id, self.reference)

    def stand_in(self, batch: dict[str, Any]) -> None:
        super().stand_in(batch)
        batch["pair_weight"] = torch.zeros_like(batch["pair_weight"])
        batch["n_train_tokens"] = 0
