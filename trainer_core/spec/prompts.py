"""Prompt rows, the torch-free checks: what reinforcement fine-tuning (method ``grpo``) samples
answers to. A row is chat ``messages`` ending with a user turn (the turn the model answers);
earlier turns may hold assistant messages, and every other field of the row is the row's
``item``, which graders read as ``item.*``. The API checks uploads with ``prompt_problems``; the
core reads the rows with ``trainer_core.grpo.prompts``.

Example:

>>> prompt_problems({"messages": [{"role": "user", "content": "2 plus 2?"}], "answer": "4"})
[]
>>> prompt_problems({"messages": [{"role": "user", "content": "hi"},
...                               {"role": "assistant", "content": "hello"}]})
['messages: the last message must be a user turn, the one the model answers (got assistant)']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer_core.spec.chat import message_problems
from trainer_core.spec.tools import parallel_problems, tools_problems


def ends_with_user(messages: Any) -> bool:
    """The conversation's last message is a user turn (the one a sampled answer answers)."""
    return (
        isinstance(messages, list)
        and bool(messages)
        and isinstance(messages[-1], Mapping)
        and messages[-1].get("role") == "user"
    )


def prompt_problems(row: Mapping[str, Any], messages_column: str = "messages") -> list[str]:
    """What is wrong with one prompt row (each problem names its field), or []."""
    parallel = row.get("parallel_tool_calls")
    messages = row.get(messages_column)
    problems = tools_problems(row.get("tools")) + parallel_problems(parallel)
    problems += message_problems(
        messages, messages_column, require_trained=False, parallel_tool_calls=parallel is not False
    )
    if not problems and isinstance(messages, list) and not ends_with_user(messages):
        last = messages[-1].get("role")  # a list of messages: message_problems found none wrong
        problems.append(
            f"{messages_column}: the last message must be a user turn, the one the "
            f"model answers (got {last})"
        )
    return problems
