"""Chat and instruction data, the torch-free part: which format a dataset is in, the shape of an
OpenAI-style conversation and its checks (the API checks uploads with them, the core checks the
rows it trains on), and the built-in ChatML template.

Formats (task causal-lm):
- ``messages``: a column of conversations, ``[{"role", "content", "weight"?}, ...]``; what is
  trained is the assistant messages whose ``weight`` is not 0 (their content and the end-of-turn
  text the template closes each with), never role headers, system, user or tool text.
- ``prompt-completion``: two string columns; the completion and the EOS are trained.
- ``text``: one string column, every token trained.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

DatasetFormat = Literal["auto", "text", "messages", "prompt-completion", "preference"]
ResolvedFormat = Literal["text", "messages", "prompt-completion", "preference"]
# OpenAI's preference rows (``trainer_core.spec.preference``); TRL's are prompt/chosen/rejected.
OPENAI_PREFERENCE_COLUMNS = ("input", "preferred_output", "non_preferred_output")
ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_PROBLEMS = 20  # an upload's report lists at most this many

# ChatML (``chat_template: "chatml"``), with ``{% generation %}`` markers around what is trained:
# an assistant message's content and its end of turn, "<|im_end|>" and the newline after it. The
# same span that rendering the conversation with and without that message tells apart.
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{- message['content'] + '<|im_end|>\\n' -}}{%- endgeneration -%}"
    "{%- else -%}"
    "{{- message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
TEMPLATES = {"chatml": CHATML_TEMPLATE}


def template_text(chat_template: str) -> str:
    """A spec's ``chat_template``: a name of ours (``TEMPLATES``) or the Jinja text itself."""
    return TEMPLATES.get(chat_template, chat_template)


def no_template(model: str) -> str:
    """Why a messages job cannot train on ``model``: at POST and at run time alike."""
    return (
        f"{model} has no chat template: give chat_template ('chatml' or a Jinja template), or a "
        "model whose tokenizer has one"
    )


def resolve_format(
    columns: Iterable[str],
    requested: DatasetFormat,
    *,
    messages_column: str,
    prompt_column: str,
    completion_column: str,
    chosen_column: str = "chosen",
    rejected_column: str = "rejected",
) -> ResolvedFormat:
    """``auto``: preference when OpenAI's or TRL's three columns exist, then messages when its
    column exists, then prompt-completion when both of those columns exist, then text."""
    if requested != "auto":
        return requested
    present = set(columns)
    trl = {prompt_column, chosen_column, rejected_column}
    if set(OPENAI_PREFERENCE_COLUMNS) <= present or trl <= present:
        return "preference"
    if messages_column in present:
        return "messages"
    if prompt_column in present and completion_column in present:
        return "prompt-completion"
    return "text"


def message_problems(messages: Any, where: str = "messages") -> list[str]:
    """What is wrong with one row's conversation (each problem names its field), or []."""
    if not isinstance(messages, list) or not messages:
        return [f"{where}: a non-empty list of messages"]
    problems: list[str] = []
    trained = 0
    for i, message in enumerate(messages):
        field = f"{where}[{i}]"
        if not isinstance(message, Mapping):
            problems.append(f"{field}: an object with role and content")
            continue
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            problems.append(f"{field}.role: one of {', '.join(ROLES)} (got {role!r})")
        if not isinstance(content, str):
            problems.append(f"{field}.content: a string")
        weight = message.get("weight")  # None: absent (Arrow gives every message each key)
        if weight is not None:
            if role != "assistant":
                problems.append(f"{field}.weight: only assistant messages carry a weight")
            elif weight not in (0, 1) or isinstance(weight, bool):
                problems.append(f"{field}.weight: 0 or 1 (got {weight!r})")
        if role == "assistant" and weight != 0:
            trained += 1
    if not problems and not trained:
        problems.append(f"{where}: at least one assistant message to train (weight not 0)")
    return problems


def prompt_completion_problems(row: Mapping[str, Any], prompt: str, completion: str) -> list[str]:
    return [
        f"{column}: a string"
        for column in (prompt, completion)
        if not isinstance(row.get(column), str)
    ]


def report(problems: Sequence[tuple[int, str]]) -> str:
    """Up to ``MAX_PROBLEMS`` problems as "line N: field: what" lines (1-based lines)."""
    shown = [f"line {line}: {problem}" for line, problem in problems[:MAX_PROBLEMS]]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
