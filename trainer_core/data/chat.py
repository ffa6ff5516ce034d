"""Chat and instruction rows tokenized with what each trains: a ``loss_mask`` per token.

A conversation is rendered with its chat template (transformers' own renderer, so the text is
what ``apply_chat_template`` makes), and the character spans to train are found by one rule
(``trainer_core.data.turns``): each trained assistant message's content and the end-of-turn text
the template closes it with, never the separator after it nor the next header; with
``{% generation %}`` markers, the spans they enclose (one per assistant message, those of weight 0
left out), without them, what rendering the conversation up to the message and up to its end
tells apart. Both give the same tokens.
A row's ``tools`` reach the template as ``apply_chat_template(..., tools=...)`` does, and an
assistant's ``tool_calls`` are part of its turn (trained); their ``arguments``, OpenAI's JSON text,
reach it as the object they encode (transformers' convention). A template that renders a row's
tools or tool calls as if they were not there is refused (``chat_template``), never a silent drop.
A token is trained when it overlaps a span, the rule transformers marks tokens by. A
prompt-completion row trains its completion and the EOS. ``n_items`` counts trained tokens after
the causal shift: a row's first token predicts nothing, so it is never an item.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from transformers.utils.chat_template_utils import render_jinja_template

from trainer_core.data.chat_tools import (
    check_tools_rendered,
    decoded_message,
    decoded_tools,
    row_column,
    template_messages,
)
from trainer_core.data.tokenized import CUT_COLUMNS, rows_table, tokenizer_for
from trainer_core.data.turns import (
    Span,
    closed,
    conversation_end,
    empty_reasoning,
    fallback_span,
    without_reasoning,
)
from trainer_core.spec.chat import prompt_completion_problems, row_problems

log = logging.getLogger(__name__)
EMPTY_REASONING_TRAINED = (
    "%d rows from row %d train an empty reasoning block the template writes (<think></think>); "
    "train_empty_reasoning: false leaves it out"
)
# What a refused over-long row's message says (``load`` names the split's field for it).
TOO_LONG = "tokens a row (max_seq_length, at most the model's context)"
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


def has_generation_markers(template: str) -> bool:
    return _GENERATION.search(template) is not None


def _render(
    messages: list[dict[str, Any]],
    template: str,
    kwargs: dict[str, Any],
    *,
    prompt: bool = False,
    spans: bool = False,
) -> tuple[str, list[Span]]:
    # Annotated "-> str" upstream, it returns (texts, generation spans per text).
    result: Any = render_jinja_template(
        conversations=[messages],
        chat_template=template,
        return_assistant_tokens_mask=spans,
        add_generation_prompt=prompt,
        **kwargs,
    )
    rendered, indices = result
    found: list[Span] = [(int(a), int(b)) for a, b in indices[0]] if spans else []
    return str(rendered[0]), found


@dataclass(frozen=True)
class RenderedRow:
    """A conversation rendered, the character spans it trains, and what the preview reports:
    whether the turns were found without markers, and the empty reasoning blocks in them (trained,
    or left out with ``train_empty_reasoning: false``)."""

    text: str
    spans: list[Span]
    fallback: bool = False
    empty_reasoning: list[Span] = field(default_factory=list)


def conversation_spans(
    messages: list[dict[str, Any]],
    template: str,
    kwargs: dict[str, Any],
    *,
    assistant_only: bool,
    tools: list[dict[str, Any]] | None = None,
    train_empty_reasoning: bool = True,
) -> tuple[str, list[Span]]:
    """The rendered conversation and the character spans to train in it; ``tools``: the row's
    (OpenAI's function calling), passed to the template as ``tools``."""
    row = rendered_row(
        messages,
        template,
        kwargs,
        assistant_only=assistant_only,
        tools=tools,
        train_empty_reasoning=train_empty_reasoning,
    )
    return row.text, row.spans


def rendered_row(
    messages: list[dict[str, Any]],
    template: str,
    kwargs: dict[str, Any],
    *,
    assistant_only: bool,
    tools: list[dict[str, Any]] | None = None,
    train_empty_reasoning: bool = True,
) -> RenderedRow:
    """``conversation_spans`` with what the preview reports (``RenderedRow``)."""
    messages = template_messages(messages)
    if tools:
        kwargs = kwargs | {"tools": tools}
    marked = has_generation_markers(template)
    calling = bool(tools) or any(m.get("tool_calls") for m in messages)
    try:
        text, generated = _render(messages, template, kwargs, spans=marked)
    except Exception as exc:  # a template that knows no tool calls meets content null
        if not calling:
            raise
        raise ValueError(
            f"chat_template: it fails on this row's function calling ({exc}); give "
            "'chatml' or a template that renders tools and tool_calls"
        ) from exc
    if calling:
        check_tools_rendered(messages, text, lambda m, kw: _render(m, template, kw)[0], kwargs)
    if not assistant_only:
        return RenderedRow(text, [(0, len(text))])
    spans = _turn_spans(messages, template, kwargs, text, generated if marked else None)
    blocks = [(s, s + n) for s, e in spans if (n := empty_reasoning(text, (s, e)))]
    if not train_empty_reasoning:
        spans = [without_reasoning(text, span) for span in spans]
    return RenderedRow(text, spans, fallback=not marked, empty_reasoning=blocks)


def _turn_spans(
    messages: list[dict[str, Any]],
    template: str,
    kwargs: dict[str, Any],
    text: str,
    generated: list[Span] | None,
) -> list[Span]:
    """The trained assistant turns' spans (``turns``: one rule, marked or not)."""
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    trained = [i for i in assistants if messages[i].get("weight", 1) != 0]
    if generated is not None:
        if len(generated) == len(assistants):
            pairs = zip(generated, assistants, strict=True)
            return [closed(text, span) for span, i in pairs if i in trained]
        if len(trained) < len(assistants):
            raise ValueError(
                f"chat_template: its {len(generated)} generation blocks are not the conversation's "
                f"{len(assistants)} assistant messages one for one, so weight 0 cannot be honoured"
            )
        return [closed(text, span) for span in generated]

    def render(head: list[dict[str, Any]], prompt: bool) -> str:
        return _render(head, template, kwargs, prompt=prompt)[0]

    last = len(messages) - 1
    body_end = conversation_end(text, render, messages) if last in trained else len(text)
    return [fallback_span(text, render, messages, i, body_end) for i in trained]


def token_mask(offsets: Sequence[tuple[int, int]], spans: Sequence[Span]) -> np.ndarray:
    """1 for each token overlapping a span (spans and offsets in order: one pass)."""
    mask = np.zeros(len(offsets), dtype=np.uint8)
    s = 0
    for t, (start, end) in enumerate(offsets):
        while s < len(spans) and start >= spans[s][1]:
            s += 1
        if s == len(spans):
            break
        if end > spans[s][0]:
            mask[t] = 1
    return mask


def _encoded(
    texts: list[str],
    spans: list[list[Span]],
    tokenizer_json: str,
    max_length: int,
    *,
    first_row: int,
    refuse_longer: bool,
) -> pa.Table:
    """Tokenize (with offsets, no special tokens added: the text carries them), mask, truncate
    at ``max_length`` (or, with ``refuse_longer``, refuse a longer row, naming it), count what
    the truncation cut, and keep the rows with something to train."""
    encodings = tokenizer_for(tokenizer_json, None).encode_batch(texts, add_special_tokens=False)
    ids, masks = [], []
    items, cut_tokens, cut_items = (np.zeros(len(texts), dtype=np.int32) for _ in range(3))
    for i, (encoding, row_spans) in enumerate(zip(encodings, spans, strict=True)):
        row = first_row + i + 1  # counted from 1, as the file's lines
        full = token_mask(encoding.offsets, row_spans)
        if len(full) > max_length and refuse_longer:
            raise ValueError(
                f"row {row} is {len(full)} tokens long; this job trains on at most {max_length} "
                f"{TOO_LONG}: shorten or split it"
            )
        mask = full[:max_length]
        ids.append(encoding.ids[:max_length])
        masks.append(mask)
        items[i] = int(mask[1:].sum())  # after the shift: the first token predicts nothing
        cut_tokens[i], cut_items[i] = len(full) - len(mask), int(full[1:].sum()) - items[i]
    cut = dict(zip(CUT_COLUMNS, (cut_tokens, cut_items), strict=True))
    return rows_table(ids, items, loss_mask=masks, cut=cut).filter(pa.array(items > 0))


def _problems(rows: list[Any], where: str, first_row: int, check: Any) -> None:
    for offset, row in enumerate(rows):
        problems = check(row)
        if problems:
            raise ValueError(f"{where}: row {first_row + offset + 1}: {problems[0]}")


def decoded_conversation(conversation: Any) -> Any:
    """A conversation as Python objects. ``datasets`` stores messages whose keys differ (a
    ``weight`` on some) as JSON text (its ``Json`` feature): decoded here, as it decodes them,
    down to a tool call's ``function`` (its ``arguments`` are OpenAI's JSON text: kept)."""
    if isinstance(conversation, str):
        conversation = json.loads(conversation)
    if isinstance(conversation, list):
        return [decoded_message(json.loads(m) if isinstance(m, str) else m) for m in conversation]
    return conversation


def encode_messages(
    batch: pa.Table,
    indices: list[int],
    *,
    tokenizer_json: str,
    max_length: int,
    messages_column: str,
    template: str,
    template_kwargs: dict[str, Any],
    assistant_only: bool,
    refuse_longer: bool = False,
    train_empty_reasoning: bool = True,
) -> pa.Table:
    """One ``map`` batch of conversations (``indices``: the rows' positions in the split), with
    each row's ``tools`` and ``parallel_tool_calls`` where the data has them."""
    first = indices[0] if indices else 0
    columns = (
        batch.column(messages_column).to_pylist(),
        row_column(batch, "tools"),
        row_column(batch, "parallel_tool_calls"),
    )
    rows = [
        {
            messages_column: decoded_conversation(c),
            "tools": decoded_tools(t),
            "parallel_tool_calls": p,
        }
        for c, t, p in zip(*columns, strict=True)
    ]
    _problems(rows, "messages_column", first, lambda row: row_problems(row, messages_column))
    rendered = []
    for offset, row in enumerate(rows):
        try:
            rendered.append(
                rendered_row(
                    row[messages_column],
                    template,
                    template_kwargs,
                    assistant_only=assistant_only,
                    tools=row["tools"],
                    train_empty_reasoning=train_empty_reasoning,
                )
            )
        except ValueError as exc:
            raise ValueError(f"{exc} (row {first + offset + 1})") from exc
    blocks = sum(bool(r.empty_reasoning) for r in rendered)
    if blocks and train_empty_reasoning:
        log.warning(EMPTY_REASONING_TRAINED, blocks, first + 1)
    return _encoded(
        [r.text for r in rendered],
        [r.spans for r in rendered],
        tokenizer_json,
        max_length,
        first_row=indices[0] if indices else 0,
        refuse_longer=refuse_longer,
    )


def encode_prompt_completion(
    batch: pa.Table,
    indices: list[int],
    *,
    tokenizer_json: str,
    max_length: int,
    prompt_column: str,
    completion_column: str,
    eos_token: str,
    completion_only: bool,
    refuse_longer: bool = False,
) -> pa.Table:
    """One ``map`` batch of prompt-completion rows: the completion and the EOS are trained."""
    rows = batch.select([prompt_column, completion_column]).to_pylist()
    _problems(
        rows,
        "prompt_column",
        indices[0] if indices else 0,
        lambda row: prompt_completion_problems(row, prompt_column, completion_column),
    )
    texts, spans = [], []
    for row in rows:
        text = row[prompt_column] + row[completion_column] + eos_token
        texts.append(text)
        spans.append([(len(row[prompt_column]) if completion_only else 0, len(text))])
    return _encoded(
        texts,
        spans,
        tokenizer_json,
        max_length,
        first_row=indices[0] if indices else 0,
        refuse_longer=refuse_longer,
    )
