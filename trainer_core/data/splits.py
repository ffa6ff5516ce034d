"""The tokenized splits a run trains and evaluates on: rows of token ids with what each trains
(``TokenizedSplit``), and preference pairs (``PreferenceSplit``). Lists in tests; views of
memory-mapped Arrow in a job (``data.tokenized``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TokenizedSplit:
    """Lists in tests; ``ArrowRows``/``IntColumn`` views of memory-mapped Arrow in a job."""

    input_ids: Sequence[Any]  # rows of token ids: lists, or numpy views of the Arrow table
    labels: Sequence[int] | None  # classification only
    items: Sequence[int]  # supervised items per row
    loss_mask: Sequence[Any] | None = None  # chat and prompt-completion: 1 where trained

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class PreferenceSplit(TokenizedSplit):
    """Pairs (``data.dpo``): ``input_ids``/``loss_mask`` are the chosen sequences and
    ``items`` 1 each (the pair is the unit), beside the rejected ones and the chosen trained
    tokens (the RPO term's count)."""

    rejected_ids: Sequence[Any] = ()
    rejected_mask: Sequence[Any] = ()
    chosen_items: Sequence[int] = ()
    # The reference's summed log-probs, (pairs, 2) float32, by the model they came from: computed
    # once and kept with the tokenized rows for as long as they are (a re-plan reuses them).
    reference: dict[str, Any] = field(default_factory=dict, compare=False)
