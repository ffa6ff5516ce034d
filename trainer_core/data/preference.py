"""Preference rows tokenized as pairs: one Arrow row per pair, its two completions side by side.

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
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from trainer_core.data.chat import TOO_LONG, conversation_spans, token_mask
from trainer_core.data.tokenized import CUT_COLUMNS, _lists, rows_table, tokenizer_for
from trainer_core.spec.preference import PreferencePair, normalise_preference_row

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
        raise ValueError("chat_template: the model has none to render a prompt of messages; give "
                         "chat_template ('chatml' or a Jinja template)")  # fmt: skip
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
        text, span = completion_text(pair, completion, settings["template"],
                                     settings["template_kwargs"], settings["eos_token"])  # fmt: skip
        ids, mask = _tokens(text, span, settings["tokenizer_json"])
        if len(ids) > limit and settings["refuse_longer"]:
            raise ValueError(f"{ROW_ERROR} {row}: it is {len(ids)} tokens long; this job trains "
                             f"on at most {limit} {TOO_LONG}: shorten it")  # fmt: skip
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
        list(part) for part in zip(*encoded, strict=True)
    ) if encoded else ([], [], [], [], [], [])  # fmt: skip
    chosen_items = np.asarray([int(m[1:].sum()) for m in chosen_mask], dtype=np.int32)
    rejected_items = np.asarray([int(m[1:].sum()) for m in rejected_mask], dtype=np.int32)
    cut = {CUT_COLUMNS[0]: np.asarray(cut_tokens, dtype=np.int32),
           CUT_COLUMNS[1]: np.asarray(cut_items, dtype=np.int32)}  # fmt: skip
    keep = (chosen_items > 0) & (rejected_items > 0)
    table = rows_table(chosen_ids, np.ones(len(encoded), dtype=np.int32), loss_mask=chosen_mask,
                       cut=cut)  # fmt: skip
    table = table.append_column("rejected_ids", _lists(rejected_ids, np.int32))
    table = table.append_column("rejected_mask", _lists(rejected_mask, np.uint8))
    table = table.append_column("chosen_items", pa.array(chosen_items))
    return table.filter(pa.array(keep))
