"""Prompt rows for reinforcement fine-tuning: chat messages ending with a user turn, and every
other field of the row kept for the reward as ``item`` (OpenAI's ``item.*`` in graders)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class PromptRow:
    messages: Sequence[Mapping[str, Any]]
    item: Mapping[str, Any]  # the row without its messages: what a grader reads as item.*


def prompt_rows(rows: Iterable[Mapping[str, Any]]) -> list[PromptRow]:
    """The rows as prompts; a row whose messages do not end with a user turn is refused by
    number, since the model answers the last turn and a trailing assistant turn has no answer to
    sample."""
    prompts = []
    for number, row in enumerate(rows):
        messages = row.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"messages: row {number} has no list of messages")
        if not isinstance(messages[-1], Mapping) or messages[-1].get("role") != "user":
            raise ValueError(f"messages: row {number} must end with a user turn")
        item = {key: value for key, value in row.items() if key != "messages"}
        prompts.append(PromptRow(messages, item))
    return prompts


def encode_prompt(tokenizer: PreTrainedTokenizerBase, row: PromptRow) -> list[int]:
    """The prompt's tokens, the template's generation header included: what the model continues."""
    encoded: Any = tokenizer.apply_chat_template(
        cast(Any, list(row.messages)), add_generation_prompt=True
    )
    ids = encoded if isinstance(encoded, list) else encoded["input_ids"]
    return [int(token) for token in ids]
