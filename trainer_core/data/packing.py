"""Packing (``packing: true``): a micro-batch's rows laid end to end in one padding-free row.

Packing is a layout change only. The plan still decides which rows make each micro-batch and each
window (``data.plan``), so no row leaves its window and N_W is the padded run's; packing rows
across the whole dataset before the sampler would change which rows share a window, and with it
the updates. A packed micro-batch is built from the padded one (``accumulation.collate``), so the
labels follow the one rule, and then:
- ``input_ids`` is (1, T): the rows' real tokens in plan order, T = Σ row lengths, no padding;
- ``position_ids`` restart at 0 on each row: the model sees each row's own positions, and
  transformers isolates the rows with a block-diagonal mask built from them (``forward_inputs``
  passes no attention mask and ``use_cache=False``: either one would undo the isolation);
- each row's first label is -100: its first token would otherwise be the target of the previous
  row's last token, a label the padded run does not have. Its count is unchanged: ``n_items``
  already left each row's first token out.

The token budget of a packed micro-batch is therefore that of the plan's b rows: at most
b x its longest row, the padded batch's size, and usually much less.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer_core.accumulation import IGNORE_INDEX


def pack(batch: dict[str, Any]) -> dict[str, Any]:
    """The padding-free form of a right-padded causal-LM micro-batch (``collate``'s)."""
    real = batch["attention_mask"].bool()
    lengths = real.sum(-1)
    labels = batch["labels"].clone()
    labels[:, 0] = IGNORE_INDEX  # each row's first token is the target of nothing of its own
    starts = torch.cumsum(lengths, 0) - lengths  # where each row begins in the packed row
    packed = {key: value for key, value in batch.items() if key != "attention_mask"}
    packed["input_ids"] = batch["input_ids"][real].unsqueeze(0)
    packed["labels"] = labels[real].unsqueeze(0)
    packed["position_ids"] = (torch.arange(int(lengths.sum())) - starts.repeat_interleave(lengths))[
        None
    ]
    packed["n_rows"] = int(batch.get("n_rows", len(lengths)))  # rows, not the one packed row
    return packed
