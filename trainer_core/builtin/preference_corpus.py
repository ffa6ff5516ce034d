"""``builtin:preference-arithmetic``: preference pairs over the chat-arithmetic conversations.

Each row is a ``builtin:chat-arithmetic`` conversation cut before its last answer: the prompt is
every message up to the last user question (a system prompt and earlier turns included, their
``weight`` keys dropped: a preference prompt is never trained), ``chosen`` the right answer as
chat-arithmetic gives it ("3 plus 4 is 7."), ``rejected`` the same sentence with a wrong result
("3 plus 4 is 19."): any other number from 0 to 40, or to the right one + 10 if higher. The two
completions differ only in the number, so a policy wins the pair by judging the sum: reward
accuracy starts at chance and rises as it learns (first how large a sum can be, then the sum;
near misses only, 1 to 3 off, left a tiny model at chance after 4 epochs). Rows are in TRL's
conversational preference shape (``prompt``, ``chosen``, ``rejected``, each a message list) and
use only the words of chat-arithmetic, which the built-in chat tokenizer was trained on.
Deterministic: the same rows on every machine, built in-process like the other built-ins.
"""

from __future__ import annotations

import random
import re
from functools import cache
from typing import Any

from trainer_core.builtin.chat_corpus import SPLIT_SIZES, chat_arithmetic

# The answer's last number: "<a> <plus|minus> <b> is <result>."
_ANSWER = re.compile(r"^(?P<head>.* is )(?P<result>\d+)\.$")
MAX_RESULT = 40  # a wrong result is any other from 0 to 40 (the sums of two operands up to 20)


def wrong_answer(answer: str, rng: random.Random) -> str:
    """The answer with its result replaced by another number from 0 to 40 (or right + 10)."""
    match = _ANSWER.match(answer)
    if match is None:  # chat-arithmetic writes every answer so; a change there must show here
        raise ValueError(f"not a chat-arithmetic answer: {answer!r}")
    right = int(match["result"])
    candidates = [n for n in range(max(MAX_RESULT, right + 10) + 1) if n != right]
    return f"{match['head']}{rng.choice(candidates)}."


def _pair(conversation: list[dict[str, Any]], rng: random.Random) -> dict[str, Any]:
    last = max(i for i, message in enumerate(conversation) if message["role"] == "assistant")
    # Copies: chat_arithmetic's rows are cached and shared; only role and content travel.
    prompt = [{"role": m["role"], "content": m["content"]} for m in conversation[:last]]
    answer = str(conversation[last]["content"])
    return {
        "prompt": prompt,
        "chosen": [{"role": "assistant", "content": answer}],
        "rejected": [{"role": "assistant", "content": wrong_answer(answer, rng)}],
    }


@cache  # deterministic: build once per process (callers copy it into a Dataset)
def preference_arithmetic(split: str) -> dict[str, list[object]]:
    rng = random.Random(f"preference-arithmetic-{split}")
    pairs = [_pair(conversation, rng) for conversation in chat_arithmetic(split)["messages"]]  # type: ignore[arg-type]
    return {key: [pair[key] for pair in pairs] for key in ("prompt", "chosen", "rejected")}


__all__ = ["SPLIT_SIZES", "preference_arithmetic", "wrong_answer"]
