"""DPO's data: preference rows tokenized as pairs, and the epoch plan whose row is the pair.

**Tokenized**: one Arrow row per pair, its two completions side by side.

A pair's prompt of messages is rendered with the chat template and its generation prompt; each
completion is the prompt's conversation followed by one assistant message, and what it trains is
that message's span as the chat data finds it (``data.chat.conversation_spans``): its content and
the end-of-turn text the template closes it with. A prompt string (TRL's standard rows) is used
as written and a completion trains its text and the EOS, as prompt-completion rows do.

Columns: ``input_ids``/``loss_mask`` (the chosen sequence, so the split reads like chat data:
its length, reports and samples), ``rejected_ids``/``rejected_mask``, ``n_items`` (1: the pair is
the unit the loss averages over), ``chosen_items`` (the chosen completion's trained tokens after
the shift: the RPO term's count), and what truncation cut (``CUT_COLUMNS``). A pair either of
whose completions has nothing left to train after truncation is dropped.

**Planned**: the plan is the one every job uses (``data.plan``: a seeded permutation cut into
micro-batches of b rows and windows of K), with the pair as its row: b, K and the effective batch
count pairs, a rank's share of a micro-batch is whole pairs, and an out-of-memory re-plan halves b
in pairs. No plan can put a pair's two completions in different micro-batches, and
``accumulation.check_pairs_whole`` refuses a batch that holds them apart. A micro-batch of B pairs
is one forward of 2B sequences: the chosen ones, then the rejected ones in the same order. It
carries N_W (the window's pairs) and T_W (the window's chosen trained tokens, for the RPO term),
each divided by W under DDP (``accumulation``, "Pairs").
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from trainer_core.accumulation import MicroBatch, collate
from trainer_core.data.chat import TOO_LONG, conversation_spans, token_mask
from trainer_core.data.loader import EpochPlan
from trainer_core.data.splits import PreferenceSplit
from trainer_core.data.tokenized import (
    CUT_COLUMNS,
    IntColumn,
    _lists,
    row_lengths,
    rows_table,
    tokenizer_for,
)
from trainer_core.spec.dpo import PreferencePair, normalise_preference_row

ROW_ERROR = "preference row"  # ``load`` names the split's field for an encoder error with it
Span = tuple[int, int]


def _json(value: Any) -> Any:
    """``datasets`` may store nested values whose keys differ from row to row as JSON text."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    if isinstance(value, list):
        return [_json(v) for v in value]
    return value


def completion_text(
    pair: PreferencePair, completion: str, template: str, kwargs: dict[str, Any], eos: str
) -> tuple[str, Span]:
    """The text of the prompt and one completion, cut after the completion, and its span."""
    if pair.prompt_messages is None:
        assert pair.prompt_text is not None
        text = pair.prompt_text + completion + eos
        return text, (len(pair.prompt_text), len(text))
    if not template:
        raise ValueError(
            "chat_template: the model has none to render a prompt of messages; give "
            "chat_template ('chatml' or a Jinja template)"
        )
    messages = [*pair.prompt_messages, {"role": "assistant", "content": completion}]
    if pair.tools:
        kwargs = kwargs | {"tools": pair.tools}
    text, spans = conversation_spans(messages, template, kwargs, assistant_only=True)
    if not spans:
        raise ValueError("chat_template: it marks nothing of the completion to train")
    start, end = spans[-1]  # the completion's: the conversation's last assistant message
    return text[:end], (start, end)


def _tokens(text: str, span: Span, tokenizer_json: str) -> tuple[list[int], np.ndarray]:
    encoding = tokenizer_for(tokenizer_json, None).encode(text, add_special_tokens=False)
    return list(encoding.ids), token_mask(encoding.offsets, [span])


def _pair_tokens(pair: PreferencePair, row: int, settings: dict[str, Any]) -> list[Any]:
    """[chosen ids, chosen mask, rejected ids, rejected mask, cut tokens, cut trained tokens]."""
    out: list[Any] = []
    cut_tokens = cut_items = 0
    limit = settings["max_length"]
    for completion in (pair.chosen, pair.rejected):
        text, span = completion_text(
            pair,
            completion,
            settings["template"],
            settings["template_kwargs"],
            settings["eos_token"],
        )
        ids, mask = _tokens(text, span, settings["tokenizer_json"])
        if len(ids) > limit and settings["refuse_longer"]:
            raise ValueError(
                f"{ROW_ERROR} {row}: it is {len(ids)} tokens long; this job trains "
                f"on at most {limit} {TOO_LONG}: shorten it"
            )
        cut_tokens += max(0, len(ids) - limit)
        cut_items += int(mask[1:].sum()) - int(mask[1:limit].sum())
        out += [ids[:limit], mask[:limit]]
    return [*out, cut_tokens, cut_items]


def encode_preference(
    batch: pa.Table, indices: list[int], *, columns: dict[str, str], **settings: Any
) -> pa.Table:
    """One ``map`` batch of preference rows (``indices``: their positions in the split).
    ``settings``: tokenizer_json, max_length, template, template_kwargs, eos_token,
    refuse_longer."""
    rows = [{k: _json(v) for k, v in row.items()} for row in batch.to_pylist()]
    encoded = []
    for offset, row in enumerate(rows):
        number = (indices[offset] if indices else offset) + 1  # from 1, as the file's lines
        try:
            pair = normalise_preference_row(row, **columns)
        except ValueError as exc:
            raise ValueError(f"{ROW_ERROR} {number}: {exc}") from None
        encoded.append(_pair_tokens(pair, number, settings))
    chosen_ids, chosen_mask, rejected_ids, rejected_mask, cut_tokens, cut_items = (
        (list(part) for part in zip(*encoded, strict=True)) if encoded else ([], [], [], [], [], [])
    )
    chosen_items = np.asarray([int(m[1:].sum()) for m in chosen_mask], dtype=np.int32)
    rejected_items = np.asarray([int(m[1:].sum()) for m in rejected_mask], dtype=np.int32)
    cut = {
        CUT_COLUMNS[0]: np.asarray(cut_tokens, dtype=np.int32),
        CUT_COLUMNS[1]: np.asarray(cut_items, dtype=np.int32),
    }
    keep = (chosen_items > 0) & (rejected_items > 0)
    table = rows_table(
        chosen_ids, np.ones(len(encoded), dtype=np.int32), loss_mask=chosen_mask, cut=cut
    )
    table = table.append_column("rejected_ids", _lists(rejected_ids, np.int32))
    table = table.append_column("rejected_mask", _lists(rejected_mask, np.uint8))
    table = table.append_column("chosen_items", pa.array(chosen_items))
    return table.filter(pa.array(keep))


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
        self._tokens = np.asarray(
            tokens.array if isinstance(tokens, IntColumn) else tokens, dtype=np.int64
        )
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
