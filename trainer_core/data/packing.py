"""Packing (``packing: true``): a micro-batch's rows laid end to end, without padding between them.

Packing is a layout change only. The plan still decides which rows make each micro-batch and each
window (``data.plan``), so no row leaves its window and N_W is the padded run's; packing rows
across the whole dataset before the sampler would change which rows share a window, and with it
the updates. A packed micro-batch is built from the padded one (``accumulation.collate``), so the
labels follow the one rule, and then:
- ``position_ids`` restart at 0 on each row: the model sees each row's own positions, and
  transformers isolates the rows with a block-diagonal mask built from them (``forward_inputs``
  passes no attention mask and ``use_cache=False``: either one would undo the isolation);
- each row's first label is -100: its first token would otherwise be the target of the previous
  row's last token, a label the padded run does not have. Its count is unchanged: ``n_items``
  already left each row's first token out.

Two layouts, chosen by the model's attention (``loop.packing_check.packing_layout``):
- ``"bins"`` (sdpa, eager, flex): the rows go first-fit, longest first, into packed rows as wide
  as the window's longest row (``data.pack_plan`` chose the micro-batch's rows so they fill such
  rows), so no row is split: the token budget of a micro-batch is about its share of the
  window's tokens, and a packed row's attention costs no more than one padded row of the
  window's (a block-diagonal mask is still computed in full). A packed row's unused tail is one more segment of padding with
  its own positions and no labels: no mask is needed for it either.
- ``"one-row"`` (flash-attention varlen): every row in one packed row; transformers uses the
  variable-length kernel only for a batch of one, and it computes no cross-row attention at all.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from trainer_core.accumulation import IGNORE_INDEX

Layout = Literal["bins", "one-row"]


def place(lengths: list[int], layout: Layout, width: int | None = None) -> list[list[int]]:
    """The rows (indices into ``lengths``) of each packed row, first-fit longest first into
    rows as wide as ``width`` (default: the longest) (``"bins"``), or all in one."""
    if layout == "one-row":
        return [list(range(len(lengths)))]
    width = max([*lengths, width or 0])
    bins: list[list[int]] = []
    room: list[int] = []
    for row in sorted(range(len(lengths)), key=lambda r: -lengths[r]):  # stable: plan order
        slot = next((i for i, free in enumerate(room) if free >= lengths[row]), None)
        if slot is None:
            bins.append([])
            room.append(width)
            slot = len(bins) - 1
        bins[slot].append(row)
        room[slot] -= lengths[row]
    return bins


def pack(
    batch: dict[str, Any], layout: Layout = "bins", width: int | None = None
) -> dict[str, Any]:
    """The packed form of a right-padded causal-LM micro-batch (``collate``'s); ``width``: of
    the packed rows (``"bins"``), at least the longest row (the plan passes its window's)."""
    real = batch["attention_mask"].bool()
    lengths = real.sum(-1).tolist()
    labels = batch["labels"].clone()
    labels[:, 0] = IGNORE_INDEX  # each row's first token is the target of nothing of its own
    bins = place(lengths, layout, width)
    width = max(sum(lengths[r] for r in rows) for rows in bins)  # no wider than needed
    ids = torch.zeros((len(bins), width), dtype=batch["input_ids"].dtype)
    target = torch.full((len(bins), width), IGNORE_INDEX, dtype=labels.dtype)
    positions = torch.zeros((len(bins), width), dtype=torch.long)
    for i, rows in enumerate(bins):
        start = 0
        for row in rows:
            end = start + lengths[row]
            ids[i, start:end] = batch["input_ids"][row, : lengths[row]]
            target[i, start:end] = labels[row, : lengths[row]]
            positions[i, start:end] = torch.arange(lengths[row])
            start = end
        positions[i, start:] = torch.arange(width - start)  # the tail: a segment of its own
    packed = {key: value for key, value in batch.items() if key != "attention_mask"}
    packed |= {"input_ids": ids, "labels": target, "position_ids": positions}
    packed["n_rows"] = int(batch.get("n_rows", len(lengths)))  # rows, not packed rows
    return packed
