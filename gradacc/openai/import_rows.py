"""Fine-tuning rows as OpenAI and Together write them, made rows that this server trains exactly
as they would train there, or refused saying why (``Refused``). Pure: a JSON object in, a row out.

- Chat rows (``messages``, with ``tools`` and ``parallel_tool_calls``): OpenAI's rules. A weight
  on a non-assistant message is Together's (OpenAI allows none there), and so is every weight of
  a row read with ``rules="together"``: there a message trains unless its weight is 0, and a row
  with any weight trains its user and system messages too (Together turns ``train_on_inputs`` on).
  This server trains assistant messages only, so a non-assistant message that Together would
  train refuses the row; one of weight 0 loses the weight (not trained: the same tokens).
- A row's own ``weight`` (one number for the whole sample, Fireworks' form): 1 is the default and
  goes; 0 trains nothing and leaves the row out; any other value is refused. The loss here is a
  mean over the window's trained tokens, each counted once: a row's tokens cannot count 2.5
  times, so such a weight could only be approximated.
- Preference rows (OpenAI's ``input``/``preferred_output``/``non_preferred_output``, TRL's
  ``prompt``/``chosen``/``rejected``), prompt-completion rows (OpenAI's legacy form, Together's
  instruction form) and ``text`` rows (Together's) pass as they are, checked.
Fields no trainer reads (an ``id``, ``metadata``) are left out of the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from trainer_core.spec.chat import (
    OPENAI_PREFERENCE_COLUMNS,
    prompt_completion_problems,
    row_problems,
)
from trainer_core.spec.dpo import preference_problems

RowKind = Literal["messages", "prompt-completion", "preference", "text"]
Form = Literal["stored-completions", "messages", "preference", "prompt-completion", "text"]
Rules = Literal["openai", "together"] | None  # None: by the row (Together's where it shows)
TRL_PREFERENCE = ("prompt", "chosen", "rejected")
CHAT_FIELDS = ("tools", "parallel_tool_calls")
SAMPLE_WEIGHT = (
    "weight {weight!r}: a row weighted apart from the others cannot be trained exactly here "
    "(the loss is a mean over the window's trained tokens, each counted once); weights 0 (left "
    "out) and 1 (the default) are taken"
)


class Refused(ValueError):
    """A record that cannot become a training row; the message names the field and says why."""


@dataclass(frozen=True)
class Converted:
    """A row to write, the kind of file it belongs in, the form it was read as, and the model
    that answered it (stored completions)."""

    kind: RowKind
    row: dict[str, Any]
    form: Form
    model: str | None = None


def form_of(record: Mapping[str, Any]) -> Form | None:
    """The form a record's keys show (None: none this import reads)."""
    keys = set(record)
    if "choices" in keys or "response" in keys or record.get("object") == "chat.completion":
        return "stored-completions"
    if keys & set(OPENAI_PREFERENCE_COLUMNS) or {"chosen", "rejected"} <= keys:
        return "preference"
    if "messages" in keys:
        return "messages"
    if {"prompt", "completion"} <= keys:
        return "prompt-completion"
    if "text" in keys:
        return "text"
    return None


def fine_tuning_row(record: Mapping[str, Any], form: Form, rules: Rules) -> Converted:
    """A fine-tuning file's row (any ``form`` but stored completions), checked as the trainer
    checks it."""
    _sample_weight(record)
    if form == "messages":
        return Converted("messages", _chat_row(record, rules), form)
    if form == "preference":
        columns = OPENAI_PREFERENCE_COLUMNS if "input" in record else TRL_PREFERENCE
        row = {c: record[c] for c in columns if c in record}
        return Converted("preference", _checked(row, preference_problems(row)), form)
    if form == "prompt-completion":
        row = {"prompt": record["prompt"], "completion": record["completion"]}
        problems = prompt_completion_problems(row, "prompt", "completion")
        return Converted("prompt-completion", _checked(row, problems), form)
    text = record.get("text")
    if not isinstance(text, str) or not text.strip():
        raise Refused("text: a non-empty string")
    return Converted("text", {"text": text}, form)


def _checked(row: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    if problems:
        raise Refused(problems[0])
    return row


def _sample_weight(record: Mapping[str, Any]) -> None:
    weight = record.get("weight")
    if weight is None or (weight == 1 and not isinstance(weight, bool)):
        return
    if weight == 0 and not isinstance(weight, bool):
        raise Refused("weight 0: the row trains nothing, so it is left out")
    raise Refused(SAMPLE_WEIGHT.format(weight=weight))


def _chat_row(record: Mapping[str, Any], rules: Rules) -> dict[str, Any]:
    """A chat row by OpenAI's or Together's weights (the module's docstring)."""
    if record.get("functions") is not None:
        raise Refused("functions: legacy function calling is not trained; use tools")
    messages = record.get("messages")
    if isinstance(messages, list) and all(isinstance(m, Mapping) for m in messages):
        if _together(messages, rules):
            messages = _together_messages(messages)
        for i, message in enumerate(messages):
            if message.get("function_call") is not None:
                raise Refused(f"messages[{i}].function_call: legacy; use tool_calls")
    row: dict[str, Any] = {"messages": messages}
    row |= {f: record[f] for f in CHAT_FIELDS if record.get(f) is not None}
    return _checked(row, row_problems(row))


def _together(messages: list[Mapping[str, Any]], rules: Rules) -> bool:
    if rules is not None:
        return rules == "together"
    return any("weight" in m and m.get("role") != "assistant" for m in messages)


def _together_messages(messages: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Together's weights as this server's: what Together trains must be an assistant message."""
    weighted = any("weight" in m for m in messages)
    kept = []
    for i, message in enumerate(messages):
        weight = message.get("weight", 1 if weighted else 0)
        if message.get("role") == "assistant":
            kept.append(dict(message))
        elif weight == 0 and not isinstance(weight, bool):
            kept.append({k: v for k, v in message.items() if k != "weight"})
        else:
            why = (
                f"weight {weight!r}" if "weight" in message else "no weight, in a row with weights"
            )
            raise Refused(
                f"messages[{i}]: Together trains a {message.get('role')} message unless its "
                f"weight is 0 (this one: {why}), and this server trains assistant messages "
                "only: give it weight 0, or train every message of a file without weights "
                "with assistant_only_loss false"
            )
    return kept
