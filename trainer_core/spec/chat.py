"""Chat and instruction data, the torch-free part: which format a dataset is in, the shape of an
OpenAI-style conversation and its checks (the API checks uploads with them, the core checks the
rows it trains on), and the built-in ChatML template.

Formats (task causal-lm):
- ``messages``: a column of conversations, ``[{"role", "content", "weight"?}, ...]``; what is
  trained is the assistant messages whose ``weight`` is not 0 (their content, their tool calls
  and the end-of-turn text the template closes each with), never role headers, system, user or
  tool text. A row may carry OpenAI's function calling (``tools``, ``parallel_tool_calls``,
  assistant ``tool_calls``, ``tool`` messages): checked by ``trainer_core.spec.tools``.
- ``prompt-completion``: two string columns; the completion and the EOS are trained.
- ``text``: one string column, every token trained.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from trainer_core.spec.shapes import SHAPES
from trainer_core.spec.tools import (
    answer_problems,
    parallel_problems,
    tool_call_problems,
    tools_problems,
)

DatasetFormat = Literal["auto", "text", "messages", "prompt-completion", "preference"]
ResolvedFormat = Literal["text", "messages", "prompt-completion", "preference"]
# OpenAI's preference rows (``trainer_core.spec.dpo``); TRL's are prompt/chosen/rejected.
OPENAI_PREFERENCE_COLUMNS = ("input", "preferred_output", "non_preferred_output")
ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_PROBLEMS = 20  # an upload's report lists at most this many

# ChatML (``chat_template: "chatml"``, and builtin:tiny-chat's own), with ``{% generation %}``
# markers around what is trained: an assistant message's content, its tool calls and its end of
# turn, "<|im_end|>"; the newline after it separates turns and is not trained (the rule of
# ``trainer_core.data.turns``: the same tokens the template trains without its markers). Function
# calling as Qwen's ChatML writes it: a row's ``tools`` as JSON lines in a system turn (the row's
# own system message first, then them), each call as ``<tool_call>{"name": ..., "arguments":
# ...}</tool_call>``; a ``tool`` message is a turn of role tool. A row without tools or tool
# calls renders as it did before tools existed. The parts for tools go without "-" (nothing lies
# between the tags to trim).
CHATML_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\n' }}"
    "{% if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{% endif %}"
    "{{ '<tools>' }}{% for t in tools %}{{ '\\n' + t | tojson }}{% endfor %}"
    "{{ '\\n</tools><|im_end|>\\n' }}{% endif %}"
    "{%- for message in messages -%}"
    "{% if not (tools and loop.first and message.role == 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}"
    "{% if message.tool_calls %}{{ message.content or '' }}"
    "{% for c in message.tool_calls %}{% set f = c.function or c %}"
    "{{ ('\\n' if message.content or not loop.first else '') + '<tool_call>\\n{\"name\": ' + f.name"
    " | tojson + ', \"arguments\": ' + (f.arguments if f.arguments is string else f.arguments"
    " | tojson) + '}\\n</tool_call>' }}"
    "{% endfor %}{{ '<|im_end|>' }}"
    "{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}"
    "{%- endgeneration -%}{{ '\\n' }}"
    "{%- else -%}"
    "{{- message['content'] + '<|im_end|>\\n' -}}"
    "{% endif %}{% endif %}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

TEMPLATES = {"chatml": CHATML_TEMPLATE}


def template_text(chat_template: str) -> str:
    """A spec's ``chat_template``: a name of ours (``TEMPLATES``) or the Jinja text itself."""
    return TEMPLATES.get(chat_template, chat_template)


# The built-in models' own templates (their tokenizers are built with them: builtin/models.py).
# The shapes (``spec.shapes``) take tiny-chat's tokenizer, template included.
BUILTIN_TEMPLATES = {
    "builtin:tiny-chat": CHATML_TEMPLATE,
    "builtin:small-chat": CHATML_TEMPLATE,
    **dict.fromkeys(SHAPES, CHATML_TEMPLATE),
}


def known_template(chat_template: str | None, model: str) -> str | None:
    """The template a messages job renders with, where the spec alone tells (its own, or a
    built-in model's); None: the model's tokenizer holds it, read as the job runs."""
    if chat_template is not None:
        return template_text(chat_template)
    return BUILTIN_TEMPLATES.get(model)


def no_template(model: str) -> str:
    """Why a messages job cannot train on ``model``: at POST and at run time alike."""
    return (
        f"{model} has no chat template: give chat_template ('chatml' or a Jinja template), or a "
        "model whose tokenizer has one"
    )


class IncompletePairs(ValueError):
    """Preference rows missing a field of every pair (``missing``, in the shape's order)."""

    def __init__(self, needed: Sequence[str], missing: list[str]) -> None:
        super().__init__(
            f"preference rows need {', '.join(needed)}: no row has {' or '.join(missing)}"
        )
        self.missing = missing


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
    column exists, then prompt-completion when both of those columns exist, then text. Columns
    of a pair without all its fields (a side of OpenAI's, or two of TRL's three with a side) are
    ``IncompletePairs`` naming the missing ones: never read as text."""
    if requested != "auto":
        return requested
    present = set(columns)
    trl = (prompt_column, chosen_column, rejected_column)
    if set(OPENAI_PREFERENCE_COLUMNS) <= present or set(trl) <= present:
        return "preference"
    # OpenAI's side names are its own; TRL's ("chosen", "rejected") are taken for pairs beside
    # one more of its three.
    for needed, least in ((OPENAI_PREFERENCE_COLUMNS, 1), (trl, 2)):
        found = present & set(needed)
        if found & set(needed[1:]) and len(found) >= least:
            raise IncompletePairs(needed, [c for c in needed if c not in present])
    if messages_column in present:
        return "messages"
    if prompt_column in present and completion_column in present:
        return "prompt-completion"
    return "text"


def message_problems(
    messages: Any,
    where: str = "messages",
    *,
    parallel_tool_calls: bool = True,
    require_trained: bool = True,
) -> list[str]:
    """What is wrong with one row's conversation (each problem names its field), or []. An
    assistant message may make tool calls (then its content may be null), a ``tool`` message
    answers one made earlier (``trainer_core.spec.tools``). ``require_trained`` False: a prompt
    (reinforcement fine-tuning samples its answer), which needs no assistant message."""
    if not isinstance(messages, list) or not messages:
        return [f"{where}: a non-empty list of messages"]
    problems: list[str] = []
    trained = 0
    call_ids: set[str] = set()  # the tool calls made so far, which a tool message may answer
    for i, message in enumerate(messages):
        field = f"{where}[{i}]"
        if not isinstance(message, Mapping):
            problems.append(f"{field}: an object with role and content")
            continue
        role = message.get("role")
        if role not in ROLES:
            problems.append(f"{field}.role: one of {', '.join(ROLES)} (got {role!r})")
        problems += _tool_fields(message, field, role, call_ids, parallel=parallel_tool_calls)
        calls = role == "assistant" and message.get("tool_calls") is not None
        content = message.get("content")
        if not isinstance(content, str) and not (calls and content is None):
            problems.append(
                f"{field}.content: a string"
                + (" (or null, with tool_calls)" if role == "assistant" else "")
            )
        weight = message.get("weight")  # None: absent (Arrow gives every message each key)
        if weight is not None:
            if role != "assistant":
                problems.append(f"{field}.weight: only assistant messages carry a weight")
            elif weight not in (0, 1) or isinstance(weight, bool):
                problems.append(f"{field}.weight: 0 or 1 (got {weight!r})")
        if role == "assistant" and weight != 0:
            trained += 1
    if not problems and not trained and require_trained:
        problems.append(f"{where}: at least one assistant message to train (weight not 0)")
    return problems


def _tool_fields(
    message: Mapping[str, Any], field: str, role: Any, call_ids: set[str], *, parallel: bool
) -> list[str]:
    """A message's ``tool_calls`` and ``tool_call_id``: on the roles that carry them, well made.
    None stands for absent (Arrow gives every message each key)."""
    problems = []
    if message.get("tool_calls") is not None:
        if role == "assistant":
            problems += tool_call_problems(
                message["tool_calls"], f"{field}.tool_calls", call_ids, parallel=parallel
            )
        else:
            problems.append(f"{field}.tool_calls: only assistant messages make tool calls")
    if role == "tool":
        problems += answer_problems(message, field, call_ids)
    elif message.get("tool_call_id") is not None:
        problems.append(f"{field}.tool_call_id: only tool messages answer a tool call")
    return problems


def row_problems(row: Mapping[str, Any], messages_column: str = "messages") -> list[str]:
    """A conversation row: its messages with the row's ``tools`` and ``parallel_tool_calls``
    (OpenAI's function calling; both optional)."""
    parallel = row.get("parallel_tool_calls")
    problems = tools_problems(row.get("tools")) + parallel_problems(parallel)
    return problems + message_problems(
        row.get(messages_column), messages_column, parallel_tool_calls=parallel is not False
    )


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
