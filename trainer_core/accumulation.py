"""The accumulation math, written once and used by all three backends.

An epoch is a seeded permutation of the training rows, cut into micro-batches of ``b`` rows, grouped
into optimizer windows of ``K`` micro-batches (the last window of an epoch may hold fewer). The
order depends on (seed, epoch) only, never on b or K, so (b, K) and (b·K, 1) see the same windows:
ceil(ceil(n/b)/K) == ceil(n/(b·K)) and window j holds rows [j·b·K, (j+1)·b·K) of the permutation.

Every micro-batch carries ``n_window_items``: the supervised items (tokens with a label for a causal
LM, rows for classification) of its *whole* window. Each micro-step back-propagates
``Σ item losses / n_window_items``, so after the window's last backward the gradient is exactly
∇[Σ_{items in W} loss / N_W] — for a partial window too, where dividing by K would be wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from trainer_core.failpoints import check_out_of_memory

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MicroBatch:
    rows: list[int]
    window: int  # index of its optimizer window within the epoch
    n_window_items: int
    last_in_window: bool


def epoch_order(n_rows: int, seed: int, epoch: int) -> list[int]:
    """The rows of one epoch in training order; a function of (seed, epoch) only."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order: list[int] = torch.randperm(n_rows, generator=generator).tolist()
    return order


def micro_batches_per_epoch(n_rows: int, batch_size: int) -> int:
    return math.ceil(n_rows / batch_size)


def optimizer_steps_per_epoch(n_rows: int, batch_size: int, accumulation: int) -> int:
    return math.ceil(micro_batches_per_epoch(n_rows, batch_size) / accumulation)


def plan_epoch(
    order: list[int], items: list[int], batch_size: int, accumulation: int
) -> list[MicroBatch]:
    """Cut one epoch's order into micro-batches and annotate each with its window's item count."""
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    plan: list[MicroBatch] = []
    for window, start in enumerate(range(0, len(chunks), accumulation)):
        members = chunks[start : start + accumulation]
        n_items = sum(items[row] for chunk in members for row in chunk)
        for position, rows in enumerate(members):
            plan.append(MicroBatch(rows, window, n_items, position == len(members) - 1))
    return plan


def collate(
    input_ids: list[list[int]],
    labels: list[int] | None,
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
