"""The accumulation math, written once and used by all three backends.

An epoch is a seeded permutation of the training rows, cut into micro-batches of ``b`` rows, grouped
into optimizer windows of ``K`` micro-batches (the last window of an epoch may hold fewer). The
order depends on (seed, epoch) only, never on b or K, so (b, K) and (b·K, 1) see the same windows
(the plan: ``trainer_core.data.plan``).

Every micro-batch carries ``n_window_items``: the supervised items (tokens with a label after the
causal shift for a causal LM, i.e. trained tokens that are not a row's first; rows for
classification) of its *whole* window. Each micro-step back-propagates
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
    loss_mask: Sequence[Any] | None = None,  # per row, 1 where a token is trained (chat data)
) -> dict[str, Any]:
    """Right-pad one micro-batch. Causal-LM labels are the ids, -100 on padding and on tokens
    the row does not train (a prompt, a user turn)."""
    rows = [input_ids[i] for i in batch.rows]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    if labels is None:
        trained = mask
        if loss_mask is not None:
            trained = torch.zeros_like(mask)
            for i, row in enumerate(batch.rows):
                trained[i, : len(loss_mask[row])] = torch.tensor(loss_mask[row], dtype=torch.long)
        target = ids.masked_fill(trained == 0, IGNORE_INDEX)
        n_items = int(trained[:, 1:].sum())  # each row's first token predicts nothing
    else:
        target = torch.tensor([labels[i] for i in batch.rows], dtype=torch.long)
        n_items = len(rows)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": target,
        "n_items": n_items,
        "n_tokens": int(mask.sum()),  # real tokens; input_ids.numel() - n_tokens is padding
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


def token_hits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """How many trained tokens the causal LM predicts exactly (argmax), after the shift."""
    predicted, target = logits[:, :-1, :].argmax(-1), labels[:, 1:]
    return ((predicted == target) & (target != IGNORE_INDEX)).sum()


@dataclass(frozen=True)
class MicroStep:
    loss: torch.Tensor  # to back-propagate: Σ item losses / N_W
    summed: torch.Tensor  # detached Σ item losses, for the meters
    hits: torch.Tensor | None = None  # trained tokens predicted exactly, when counted


COUNT_HITS = "count_hits"  # a batch key: the run wants this window's token accuracy


def micro_step_loss(model: torch.nn.Module, batch: dict[str, Any], causal: bool) -> MicroStep:
    """The micro-step's loss and what the meters keep. The model gets no labels: its own loss
    would be a per-micro-batch mean, which is exactly what accumulation must avoid. Token hits
    are counted (on the device, one argmax) only when the batch asks: the run asks in the
    windows whose step it records."""
    check_out_of_memory(int(batch["input_ids"].shape[0]))  # a test-only failpoint (failpoints.py)
    outputs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    total = summed_loss(outputs.logits, batch["labels"], causal)
    hits = None
    if causal and batch.get(COUNT_HITS):
        hits = token_hits(outputs.logits.detach(), batch["labels"])
    return MicroStep(total / batch["n_window_items"], total.detach(), hits)
