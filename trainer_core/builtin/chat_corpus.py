"""``builtin:chat-arithmetic``: conversations in OpenAI's chat format, generated deterministically.

A user asks for a sum, then, in up to two more turns, to add or take away another number; the
assistant answers by saying the sum it computed ("3 plus 4 is 7."), so a tiny model learns to copy
the operands at once and the arithmetic over a few epochs: the loss falls and the token accuracy
rises. Some rows open with a system prompt, and some earlier assistant turns carry ``weight: 0``
(shown, never trained), as OpenAI's format allows.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

SYSTEM_PROMPTS = [
    "You are a careful calculator.",
    "Answer with the result.",
    "You do sums for children.",
]
# A system prompt as an application writes one (about 200 words): builtin:small-chat's context
# holds it, and its tokenizer was trained on it (``small_chat_texts``).
LONG_SYSTEM_PROMPT = (
    "You are the arithmetic assistant of a primary school's homework portal. Pupils between "
    "six and eleven years old ask you questions about addition and subtraction, one question "
    "at a time, and sometimes follow a first question with another that builds on your answer. "
    "Always answer in one short sentence that repeats the numbers of the question and then "
    "gives the result, for example: three plus four is seven. Write numbers as digits. Never "
    "show working, never ask the pupil a question back, and never change the subject, even "
    "when the pupil asks about something else: in that case, say kindly that you only help with "
    "sums. If a question is not clear, answer the closest sum you can read in it. Keep a warm "
    "and patient tone; the pupils may be tired or unsure, and a friendly answer helps them go "
    "on. Do not use emoji, lists, headings or any formatting: your answer is read aloud by the "
    "portal's speech engine, which reads every symbol it meets. Teachers review a sample of "
    "the conversations every week to check that the answers are right and kind, so accuracy "
    "matters more than speed. When a result would be below zero, say that the sum cannot be "
    "done with whole numbers yet."
)
SPLIT_SIZES = {"train": 2000, "validation": 400}


def _turns(rng: random.Random) -> list[dict[str, Any]]:
    a, b = rng.randint(0, 20), rng.randint(0, 20)
    total = a + b
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"what is {a} plus {b}?"},
        {"role": "assistant", "content": f"{a} plus {b} is {total}."},
    ]
    for _ in range(rng.randint(0, 2)):
        c = rng.randint(1, 9)
        if rng.random() < 0.5 and total >= c:
            word, result = "minus", total - c
        else:
            word, result = "plus", total + c
        messages += [
            {"role": "user", "content": f"and {word} {c}?"},
            {"role": "assistant", "content": f"{total} {word} {c} is {result}."},
        ]
        total = result
    return messages


def _conversation(rng: random.Random) -> list[dict[str, Any]]:
    messages = _turns(rng)
    assistants = [m for m in messages if m["role"] == "assistant"]
    for message in assistants[:-1]:  # the last answer is always trained
        if rng.random() < 0.2:
            message["weight"] = 0
    if rng.random() < 0.5:
        messages.insert(0, {"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    return messages


@cache  # deterministic: build once per process (callers copy it into a Dataset)
def chat_arithmetic(split: str) -> dict[str, list[object]]:
    rng = random.Random(f"chat-arithmetic-{split}")
    return {"messages": [_conversation(rng) for _ in range(SPLIT_SIZES[split])]}


def chat_texts() -> list[str]:
    """What the built-in chat tokenizer is trained on: every message's role line and text, as
    the ChatML template writes them (its markers are special tokens, added apart)."""
    texts = ["system\n", "developer\n", "tool\n"]
    for split in SPLIT_SIZES:
        for conversation in chat_arithmetic(split)["messages"]:
            assert isinstance(conversation, list)
            texts += [f"{message['role']}\n{message['content']}" for message in conversation]
    return texts
