"""One rule for every template: for each family (``chat_families``), the marker-free fallback
trains exactly the tokens its marked twin marks, on multi-turn conversations with system prompts
and weight-0 turns; the end-of-turn token is trained and the separator after it is not; an empty
think block is trained by default, reported, and left out on request. The negative control (the
fallback as it was: the turn with its separator) is told apart."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from tests.trainer_core.chat_families import FAMILIES, Family, conversations, family_tokenizer
from trainer_core.data.chat import RenderedRow, rendered_row, token_mask

IDS = [f.name for f in FAMILIES]


def _mask(family: Family, row: RenderedRow) -> tuple[list[str], np.ndarray]:
    encoding = family_tokenizer(family).encode(row.text, add_special_tokens=False)
    return encoding.tokens, token_mask(encoding.offsets, row.spans)


def _row(family: Family, messages: list[dict[str, Any]], marked: bool, **kw: Any) -> RenderedRow:
    template = family.marked if marked else family.unmarked
    return rendered_row(messages, template, family.kwargs, assistant_only=True, **kw)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_fallback_trains_what_the_marked_twin_marks(family: Family) -> None:
    for messages in conversations():
        marked, fallback = _row(family, messages, True), _row(family, messages, False)
        assert fallback.text == marked.text and fallback.fallback and not marked.fallback
        tokens, mask = _mask(family, marked)
        assert mask.tolist() == _mask(family, fallback)[1].tolist(), family.name
        trained_turns = sum(m["role"] == "assistant" and m.get("weight", 1) != 0 for m in messages)
        ends = [i for i, t in enumerate(tokens) if t == family.end_of_turn and mask[i]]
        assert len(ends) == trained_turns  # each trained turn's end-of-turn token, trained
        assert not any(mask[i + 1 : i + 2].any() for i in ends)  # what follows it is not
        assert "<|endoftext|>" not in [t for t, m in zip(tokens, mask, strict=True) if m]


def test_chatml_trains_im_end_and_not_the_newline() -> None:
    family = FAMILIES[0]
    tokens, mask = _mask(family, _row(family, conversations()[0], marked=False))
    ends = [i for i, t in enumerate(tokens) if t == "<|im_end|>" and mask[i]]
    assert len(ends) == 1  # the weight-0 turn's is not trained
    assert tokens[ends[0] + 1 : ends[0] + 2] in ([], ["Ċ"]) and not mask[ends[0] + 1 :].any()


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_old_fallback_is_told_apart(family: Family) -> None:
    """The turn up to where the next message starts, separator and Phi-3's tail included: the
    comparison fails for every family that separates turns with whitespace."""
    messages = conversations()[1]
    marked = _row(family, messages, True)
    old = []
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m.get("weight", 1):
            before = _render(family, messages[:i], prompt=True)
            old.append((len(before), len(_render(family, messages[: i + 1], prompt=False))))
    old_mask = _mask(family, RenderedRow(marked.text, old))[1]
    separated = family.name not in ("llama-3", "mistral")  # they write nothing after the turn
    assert (old_mask.tolist() != _mask(family, marked)[1].tolist()) == separated


def _render(family: Family, messages: list[dict[str, Any]], *, prompt: bool) -> str:
    kwargs: dict[str, Any] = dict(family.kwargs)
    rendered: Any = render_jinja_template(conversations=[messages], chat_template=family.unmarked,
                                          add_generation_prompt=prompt, **kwargs)  # fmt: skip
    return str(rendered[0][0])


@pytest.mark.parametrize("marked", [True, False], ids=["marked", "fallback"])
def test_empty_think_block_trained_reported_and_left_out_on_request(marked: bool) -> None:
    qwen3 = next(f for f in FAMILIES if f.name == "qwen3")
    messages = conversations()[3]  # no reasoning: the template writes an empty block
    kept = _row(qwen3, messages, marked)
    cut = _row(qwen3, messages, marked, train_empty_reasoning=False)
    assert len(kept.empty_reasoning) == 1 and kept.text[slice(*kept.empty_reasoning[0])].strip()
    tokens, mask = _mask(qwen3, kept)
    cut_mask = _mask(qwen3, cut)[1]
    think = tokens.index("<think>")
    assert mask[think] and not cut_mask[think]
    assert "".join(t for t, m in zip(tokens, cut_mask, strict=True) if m) == "Yes.<|im_end|>"
    reasoned = _row(qwen3, conversations()[2], marked, train_empty_reasoning=False)
    assert (
        not reasoned.empty_reasoning and "one and one" in reasoned.text[slice(*reasoned.spans[0])]
    )
