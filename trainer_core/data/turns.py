"""What an assistant turn trains: one rule for templates with and without ``{% generation %}``
markers, so that a template and its marked twin train the same tokens.

The rule: a trained turn is its content (with its tool calls) and the end-of-turn text the template
closes it with, never the separator after them nor what follows (the next turn's header, the
conversation's tail). The separator is whitespace: ChatML's "\\n" after "<|im_end|>", Gemma's after
"<end_of_turn>". A model never generates it (generation stops at the end-of-turn token), so a
trained separator only teaches what the next prompt already supplies.
- Marked templates: the span the block encloses, less trailing whitespace (``closed``).
- Marker-free templates (``fallback_span``): the turn starts where rendering the conversation up
  to it with the generation prompt ends; it ends where its rendering stops being the same whatever
  follows it: followed by the next message (the full conversation) or by nothing (the conversation
  rendered up to it). A template that appends a tail to a finished conversation (Phi-3's EOS) or
  renders a last turn with a block the others lack (Qwen3's empty think block) is handled by the
  same comparison, cut at a separator.
- An empty reasoning block a template writes into a turn without reasoning (``<think>\\n\\n
  </think>\\n\\n``, Qwen3's) is trained by default (the rendered text holds it) and reported;
  ``train_empty_reasoning: false`` leaves it out (``without_reasoning``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Span = tuple[int, int]
# Qwen3 / DeepSeek-R1 style: a think block with nothing but whitespace inside, and the whitespace
# after it (the content follows).
EMPTY_REASONING = re.compile(r"<think>\s*</think>\s*")
NOT_A_PREFIX = (
    "chat_template: it does not render a conversation as the start of its longer versions, so an "
    "assistant message's tokens cannot be told apart; add {% generation %} markers around what "
    "the assistant says and the end-of-turn token"
)
# (messages, add_generation_prompt) -> the text the template makes of them
Render = Callable[[list[dict[str, Any]], bool], str]


def closed(text: str, span: Span) -> Span:
    """The span less its separator: the whitespace after its last other character."""
    start, end = span
    return start, start + len(text[start:end].rstrip())


def empty_reasoning(text: str, span: Span) -> int:
    """How many characters an empty reasoning block takes at the span's start (0: none)."""
    found = EMPTY_REASONING.match(text, span[0], span[1])
    return found.end() - span[0] if found else 0


def without_reasoning(text: str, span: Span) -> Span:
    return span[0] + empty_reasoning(text, span), span[1]


def _shared(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _at_separator(text: str, shared: int, whole: int) -> int:
    """``shared`` characters agree and ``whole`` exist: a divergence inside a piece of text (two
    headers that share "<|") is cut back to the last separator before it."""
    if shared >= whole:
        return shared
    cut = max(text.rfind(c, 0, shared) for c in " \n\t\r")
    return cut + 1 if cut >= 0 else 0


def conversation_end(text: str, render: Render, messages: list[dict[str, Any]]) -> int:
    """Where the conversation's turns end in ``text``: before the tail a template appends only to
    a finished conversation (not to one awaiting the assistant: Phi-3's EOS), else its end."""
    prompted = render(messages, True)
    return _at_separator(text, _shared(text, prompted), len(text))


def fallback_span(
    text: str, render: Render, messages: list[dict[str, Any]], i: int, body_end: int
) -> Span:
    """Assistant message ``i``'s trained span in ``text`` (the whole conversation rendered), for a
    template without markers; ``body_end``: ``conversation_end`` of ``text``."""
    before = render(messages[:i], True)
    upto = render(messages[: i + 1], False)
    if not (text.startswith(before) and upto.startswith(before)):
        raise ValueError(NOT_A_PREFIX)
    start = len(before)
    turn = upto[start:]  # the turn as the last thing rendered (with a finished conversation's tail)
    if i == len(messages) - 1:
        return closed(text, (start, min(start + len(turn), body_end)))
    end = start + _at_separator(turn, _shared(turn, text[start:]), len(turn))
    key = (messages[i].get("content") or "").strip()
    if key in text[start:end]:
        return closed(text, (start, end))
    return _located(text, turn, key, start)


def _located(text: str, turn: str, key: str, start: int) -> Span:
    """A turn whose last rendering differs before its content (a block injected into a last turn):
    its content found after its header, and the first piece of text that closes it there."""
    at = text.find(key, start) if key else -1
    if at < 0 or key not in turn:
        raise ValueError(NOT_A_PREFIX)
    closing = re.match(r"\S*", turn[turn.rindex(key) + len(key) :])
    end = at + len(key) + (len(closing.group()) if closing else 0)
    if closing is None or not text.startswith(closing.group(), at + len(key)):
        raise ValueError(NOT_A_PREFIX)
    return start, end
