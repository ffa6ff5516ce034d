"""Tool calls in a model's answer, read back into OpenAI's ``message.tool_calls``.

Only the format gradacc trains (``trainer_core.spec.chat``'s ChatML, Qwen's): each call is
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. A template that writes calls some
other way gets no parser (``parser_for`` is None): its answer stays text, never guessed at. A
block whose JSON is not a call (malformed, no name) stays in the content as the model wrote it.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)


@dataclass(frozen=True)
class Parsed:
    """An answer split: ``content`` (None when nothing is left outside the calls) and calls."""

    content: str | None
    tool_calls: list[dict[str, Any]]


def parses_calls(template: Any) -> bool:
    """Whether answers of a model with this chat template are parsed for calls: its template
    writes the calls it is shown as ``<tool_call>`` blocks (the one format known here)."""
    return isinstance(template, str) and OPEN in template


def _call(block: str) -> dict[str, Any] | None:
    """OpenAI's call for one block's JSON, or None when it is not one."""
    try:
        found = json.loads(block)
    except ValueError:
        return None
    if not isinstance(found, dict) or not isinstance(found.get("name"), str):
        return None
    arguments = found.get("arguments", {})
    if isinstance(arguments, str):  # a model may write the JSON text OpenAI sends
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    function = {"name": found["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}
    return {"id": "call_" + secrets.token_hex(12), "type": "function", "function": function}


def parse(text: str, *, one_call: bool = False) -> Parsed:
    """``text`` split into its calls and what lies outside them (stripped). ``one_call``
    (``parallel_tool_calls: false``): the answer ends with its first call; what the model wrote
    after it is dropped."""
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    at = 0
    for match in _BLOCK.finditer(text):
        call = _call(match.group(1).strip())
        if call is None:
            continue  # stays in the content
        kept.append(text[at : match.start()])
        at = match.end()
        calls.append(call)
        if one_call:
            at = len(text)
            break
    if not calls:
        return Parsed(text, [])
    kept.append(text[at:])
    return Parsed("".join(kept).strip() or None, calls)


def safe_prefix(text: str) -> int:
    """How much of a stream's text so far can be sent as content: up to where a ``<tool_call>``
    starts or may be starting (a suffix that begins the tag). What follows is held to the end."""
    start = text.find(OPEN)
    if start >= 0:
        return start
    for size in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-size:]):
            return len(text) - size
    return len(text)


@dataclass
class Held:
    """One streamed choice's text while its calls are read: content goes out as it comes, up to
    where a call may start (``safe_prefix``); the rest is held and parsed when the choice ends
    (``finish``), its calls sent whole in one delta: no call is streamed half-made."""

    text: str = ""
    sent: int = 0
    one_call: bool = False  # parallel_tool_calls: false (``parse``)

    def take(self, piece: str) -> str:
        """The content of ``piece`` that can go out now (maybe "")."""
        self.text += piece
        upto = max(self.sent, safe_prefix(self.text))
        out, self.sent = self.text[self.sent : upto], upto
        return out

    def finish(self) -> Parsed:
        return parse(self.text[self.sent :], one_call=self.one_call)


def call_deltas(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A stream's ``delta.tool_calls``: each call whole, with its index."""
    return [{"index": i} | call for i, call in enumerate(calls)]
