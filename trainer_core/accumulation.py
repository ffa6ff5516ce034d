"""The accumulation math, written once and used by all three backends.

An epoch is a seeded permutation of the training rows, cut into micro-batches of ``b`` rows, grouped
into optimizer windows of ``K`` micro-batches (the last window of an epoch may hold fewer). The
order depends on (seed, epoch) only, never on b or K, so (b, K) and (b·K, 1) see the same windows
(the plan: ``trainer_core.data.plan``).

Every micro-batch carries ``n_window_items``: the supervised items (tokens with a label for a causal
LM, rows for classification) of its *whole* window. Each micro-step back-propagates
``Σ item losses / n_window_items``, so after the window's last backward the gradient is exactly
∇[Σ_{items in W} loss / N_W] — for a partial window too, where dividing by K would be wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from trainer_core.testing.failpoints import check_out_of_memory

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MicroBatch:
    rows: list[int]
    window: int  # index of its optimizer window within the epoch
    n_window_items: int
    last_in_window: bool


def collate(
    input_ids: Sequence[Any],  # rows of token ids: lists, or numpy views of Arrow
    labels: Sequence[int] | None,
    batch: MicroBatch,
    pad_id: int,
) -> dict[str, Any]:
    """Right-pad one micro-batch. Causal-LM labels are the ids with -100 on padding."""
    rows = [input_ids[i] for i in batch.rows]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    if labels is None:
        target = ids.masked_fill(mask == 0, IGNORE_INDEX)
        n_items = int(mask.sum()) - len(rows)  # each row's first token predicts nothing
    else:
        target = torch.tensor([labels[i] for i in batch.rows], dtype=torch.long)
        n_items = len(rows)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": target,
        "n_items": n_items,
        "n_window_items": batch.n_window_items,
        "last_in_window": batch.last_in_window,
    }


def summed_loss(logits: torch.Tensor, labels: torch.Tensor, causal: bool) -> torch.Tensor:
    """Σ of per-item cross-entropy in float32 (a causal LM predicts token t+1 from ≤ t)."""
    if causal:
        logits, labels = logits[:, :-1, :], labels[:, 1:]
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


def micro_step_loss(
    model: torch.nn.Module, batch: dict[str, Any], causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss to back-propagate, detached item-loss sum for logging). The model gets no labels:
    its own loss would be a per-micro-batch mean, which is exactly what accumulation must avoid."""
    check_out_of_memory(int(batch["input_ids"].shape[0]))  # a test-only failpoint (failpoints.py)
    outputs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    total = summed_loss(outputs.logits, batch["labels"], causal)
    return total / batch["n_window_items"], total.detach()
