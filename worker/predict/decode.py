"""The tensors of one model's running rows: a left-padded batch with its attention mask, each
row's own position ids, and one KV cache, advanced one token per step by the batcher
(``worker.predict.batcher``), which decides the tokens.

Rows join between steps: the newcomers are run over their prompts on their own (a prefill, left
padded among themselves), then their cache is left padded (or the running one is) to a common
length and the two are stacked. Padding is masked and takes no position, so a row's logits are
its logits alone: the same numbers ``generate`` computes for it, up to the summation order of a
wider matrix product (tests/worker/test_batcher.py holds greedy tokens equal).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """``generate``'s position ids: count the real tokens; padding sits at 0 (it is masked)."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)


def _left_pad(cache: Any, mask: torch.Tensor, width: int) -> torch.Tensor:
    """Pad ``cache`` and ``mask`` with ``width`` masked columns on the left (in place for the
    cache); the padded mask."""
    if width == 0:
        return mask
    for layer in cache.layers:
        layer.keys = F.pad(layer.keys, (0, 0, width, 0))
        layer.values = F.pad(layer.values, (0, 0, width, 0))
    return F.pad(mask, (width, 0))


def mergeable(cache: Any) -> bool:
    """Only plain dynamic layers can be padded and stacked (a sliding window's cannot)."""
    return all(type(layer) is DynamicLayer for layer in cache.layers)


class Decode:
    """The KV cache, mask and next logits of the rows of one loaded model, in row order."""

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded  # its ``model`` read at each pass: a base may be wrapped meanwhile
        self.cache: Any = None
        self.mask = torch.zeros((0, 0), dtype=torch.long)
        self.logits = torch.zeros((0, 0))  # (rows, vocabulary): the next token's, float32

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        # logits_to_keep=1, as generate does: the head's product over the last position only.
        out = self.loaded.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1, :].to(dtype=torch.float32, copy=True), out.cache

    def admit(self, prompts: list[list[int]], device: torch.device) -> bool:
        """Prefill ``prompts`` and append them as the last rows; False (nothing done) when the
        running cache cannot take newcomers (they wait until it is empty)."""
        if self.rows and not mergeable(self.cache):
            return False
        longest = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (longest - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor(
            [[0] * (longest - len(p)) + [1] * len(p) for p in prompts], device=device
        )
        logits, cache = self._forward(ids, mask, _positions(mask), DynamicCache())
        if not self.rows:
            self.cache, self.mask, self.logits = cache, mask, logits
            return True
        if not mergeable(cache):
            return False
        width = max(mask.shape[1], self.mask.shape[1])
        mask = _left_pad(cache, mask, width - mask.shape[1])
        self.mask = _left_pad(self.cache, self.mask, width - self.mask.shape[1])
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            mine.keys = torch.cat([mine.keys, theirs.keys])
            mine.values = torch.cat([mine.values, theirs.values])
        self.mask = torch.cat([self.mask, mask])
        self.logits = torch.cat([self.logits, logits])
        return True

    def keep(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order), and drop the columns no kept row attends to."""
        if len(rows) == self.rows:
            return
        if not rows:
            self.cache, self.mask, self.logits = None, self.mask[:0], self.logits[:0]
            return
        index = torch.tensor(rows, device=self.mask.device)
        self.mask, self.logits = self.mask[index], self.logits[index]
        unused = int((self.mask.sum(0) == 0).long().cumprod(0).sum())  # leading all-padding columns
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, unused:]
            layer.values = layer.values[index, :, unused:]
        self.mask = self.mask[:, unused:]

    def advance(self, tokens: list[int]) -> None:
        """Run every row over its newly chosen token: the next logits."""
        device = self.mask.device
        ids = torch.tensor(tokens, device=device).unsqueeze(1)
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.rows, 1))], dim=1)
        positions = self.mask.sum(1, keepdim=True) - 1
        self.logits, self.cache = self._forward(ids, self.mask, positions, self.cache)
