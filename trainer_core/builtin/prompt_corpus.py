"""``builtin:arithmetic-prompts``: prompts for reinforcement fine-tuning over the chat-arithmetic
conversations.

Each row is a ``builtin:chat-arithmetic`` conversation cut before its last answer, as the
preference pairs are (``preference_corpus``): ``messages`` is every message up to and including
the last user question (a system prompt and earlier turns kept, their ``weight`` keys dropped:
a prompt is never trained), and the row's other fields are what a grader reads as ``item.*``:
``answer``, the assistant sentence chat-arithmetic gives ("3 plus 4 is 7."), and ``result``,
its number as a string ("7"). A ``string_check`` grader can ask for the whole sentence
(``eq`` against ``{{ item.answer }}``) or the number (``like`` against ``{{ item.result }}``).
The train and validation splits are chat-arithmetic's, cut so: the validation prompts are never
trained by an SFT job on chat-arithmetic's train split either. Deterministic, built in-process
like the other built-ins.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from trainer_core.builtin.chat_corpus import SPLIT_SIZES, chat_arithmetic


def _prompt(conversation: list[dict[str, Any]]) -> dict[str, Any]:
    last = max(i for i, message in enumerate(conversation) if message["role"] == "assistant")
    # Copies: chat_arithmetic's rows are cached and shared; only role and content travel.
    messages = [{"role": m["role"], "content": m["content"]} for m in conversation[:last]]
    answer = str(conversation[last]["content"])  # "3 plus 4 is 7."
    return {"messages": messages, "answer": answer, "result": answer.rsplit(" ", 1)[1][:-1]}


@cache  # deterministic: build once per process (callers copy it into a Dataset)
def arithmetic_prompts(split: str) -> dict[str, list[object]]:
    rows = [_prompt(conversation) for conversation in chat_arithmetic(split)["messages"]]  # type: ignore[arg-type]
    return {key: [row[key] for row in rows] for key in ("messages", "answer", "result")}


__all__ = ["SPLIT_SIZES", "arithmetic_prompts"]
