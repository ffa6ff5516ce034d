"""An eval run's ``data_source``, checked at creation, and its items.

Served:
- ``jsonl``: items that carry their own ``sample`` (``{"item": …, "sample": {"output_text": …}}``):
  graded as they are, no model asked.
- ``completions`` and ``responses``: each item's messages (``input_messages``: a ``template`` of
  ``{{item.*}}`` variables, or an ``item_reference`` such as ``item.input``) are asked of
  ``model`` with ``sampling_params`` (temperature, top_p, seed, max_completion_tokens), and the
  answer is the sample. Any model the tenant may chat with: a built-in, an ``ft:`` model, a
  checkpoint, an alias, an upstream route.

Items come ``inline`` (``source: {"type": "file_content", "content": [...]}``) or from a file
(``{"type": "file_id"}``, purpose ``evals`` or ``fine-tune``). A file's line is ``{"item": …}``
(with ``sample``), a chat training row ``{"messages": […]}`` (its item: ``input``, the messages
before the last assistant turn, and ``reference``, that turn's text), or an item itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gradacc.errors import InvalidRequest
from gradacc.evals.config import item_errors
from trainer_core.graders import GraderFailed, lookup, render

MAX_ITEMS = 50_000
KINDS = ("jsonl", "completions", "responses")
SAMPLING = ("temperature", "top_p", "seed", "max_completion_tokens")
UNSERVED = ("response_format", "text", "tools")  # in a run's sampling_params
TEXT_PARTS = ("input_text", "output_text")
ROLES = ("system", "developer", "user", "assistant")


@dataclass(frozen=True)
class RunPlan:
    kind: str
    model: str | None = None
    template: list[dict[str, Any]] | None = None
    item_reference: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    file_id: str | None = None
    inline: list[dict[str, Any]] | None = None  # [{"item": …, "sample": …}]


def parse_run_source(raw: Any) -> RunPlan:
    """The run's plan, or a 400 naming the field (``data_source.input_messages.template[1]``)."""
    where = "data_source"
    if not isinstance(raw, dict) or raw.get("type") not in KINDS:
        raise InvalidRequest(f"an object whose type is one of {', '.join(KINDS)}", param=where)
    kind = str(raw["type"])
    file_id, inline = _source(raw.get("source"), f"{where}.source")
    if kind == "jsonl":
        return RunPlan(kind, file_id=file_id, inline=inline)
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("the model to sample", param=f"{where}.model")
    template, reference = _input_messages(raw.get("input_messages"), f"{where}.input_messages")
    sampling = _sampling(raw.get("sampling_params") or {}, f"{where}.sampling_params")
    return RunPlan(kind, model, template, reference, sampling, file_id, inline)


def _source(raw: Any, where: str) -> tuple[str | None, list[dict[str, Any]] | None]:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "file_id" and isinstance(raw.get("id"), str):
        return raw["id"], None
    if kind == "file_content":
        content = raw.get("content")
        if not isinstance(content, list) or not 0 < len(content) <= MAX_ITEMS:
            raise InvalidRequest(f"a list of 1 to {MAX_ITEMS} items", param=f"{where}.content")
        for i, row in enumerate(content):
            if not isinstance(row, dict) or "item" not in row:
                raise InvalidRequest('{"item": {...}}', param=f"{where}.content[{i}]")
        return None, content
    if kind in ("stored_completions", "responses"):
        raise InvalidRequest(
            f"{kind!r} sources are not served: this server keeps no completions log to query; "
            "import the export into a file (POST /v1/files/import) and give its file_id",
            param=f"{where}.type",
        )
    raise InvalidRequest("file_content or file_id", param=f"{where}.type")


def _input_messages(raw: Any, where: str) -> tuple[list[dict[str, Any]] | None, str | None]:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "item_reference":
        reference = str(raw.get("item_reference") or "").strip().strip("{} ")
        if not reference.startswith("item."):
            raise InvalidRequest("a name in the item: item.input", param=f"{where}.item_reference")
        return None, reference
    if kind != "template" or not isinstance(raw.get("template"), list) or not raw["template"]:
        raise InvalidRequest(
            "a template (a list of messages) or an item_reference", param=f"{where}.type"
        )
    template = []
    for i, message in enumerate(raw["template"]):
        template.append(_template_message(message, f"{where}.template[{i}]"))
    return template, None


def _template_message(message: Any, where: str) -> dict[str, Any]:
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise InvalidRequest(f"a message whose role is one of {', '.join(ROLES)}", param=where)
    try:
        text = content_text(message.get("content"))
    except ValueError as exc:
        raise InvalidRequest(str(exc), param=f"{where}.content") from None
    return {"role": message["role"], "content": text}


def content_text(content: Any) -> str:
    """A message's text: a string, a text part, or a list of them (images and audio are not
    served: the models here read text)."""
    parts = content if isinstance(content, list) else [content]
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in TEXT_PARTS:
            texts.append(str(part.get("text", "")))
        else:
            raise ValueError("text only: a string or input_text/output_text parts")
    return "\n".join(texts)


def _sampling(raw: Any, where: str) -> dict[str, Any]:
    """A run's ``sampling_params``: OpenAI's structured output and tools refused when given."""
    if isinstance(raw, dict):
        for name in UNSERVED:
            if raw.get(name):
                raise InvalidRequest(f"{name} is not served in eval runs", param=f"{where}.{name}")
        raw = {k: v for k, v in raw.items() if k not in UNSERVED}
    return sampling_params(raw, where)


def sampling_params(raw: Any, where: str) -> dict[str, Any]:
    """The sampling settings a chat request gets (``SAMPLING``, numbers), or a 400 naming the
    field; an eval run's and a distillation's alike."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidRequest("an object", param=where)
    for name, value in raw.items():
        if name not in SAMPLING:
            raise InvalidRequest(f"not one of {', '.join(SAMPLING)}", param=f"{where}.{name}")
        if value is not None and not isinstance(value, int | float):
            raise InvalidRequest("a number", param=f"{where}.{name}")
    return {k: v for k, v in raw.items() if v is not None}


def file_rows(text: str) -> list[dict[str, Any]]:
    """A file's items as ``{"item": …, "sample"?: …}``; a ValueError names the line at fault."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            found = json.loads(line)
        except ValueError:
            raise ValueError(f"line {number}: not JSON") from None
        if not isinstance(found, dict):
            raise ValueError(f"line {number}: not a JSON object")
        rows.append(_row(found))
    if not 0 < len(rows) <= MAX_ITEMS:
        raise ValueError(f"1 to {MAX_ITEMS} items (this file: {len(rows)})")
    return rows


def _row(found: dict[str, Any]) -> dict[str, Any]:
    if "item" in found and set(found) <= {"item", "sample"}:
        return found
    messages = found.get("messages")
    if isinstance(messages, list) and messages:
        last = messages[-1] if isinstance(messages[-1], dict) else {}
        answered = last.get("role") == "assistant"
        item = {
            "input": messages[:-1] if answered else messages,
            "reference": content_text(last.get("content", "")) if answered else None,
        }
        return {"item": item}
    return {"item": found}


def check_items(config: dict[str, Any], rows: list[dict[str, Any]], where: str) -> None:
    """Each item fits the eval's schema: a 400 naming the first that does not."""
    for i, row in enumerate(rows):
        if problem := item_errors(config, row["item"]):
            raise InvalidRequest(f"item {i}: {problem}", param=where)


def messages_for(plan: RunPlan, item: Any) -> list[dict[str, str]]:
    """The messages asked for ``item``; ``GraderFailed`` (``invalid_variable_error``) when its
    template names what the item lacks."""
    namespaces = {"item": item, "sample": {}}
    if plan.template is not None:
        return [
            {"role": _chat_role(m["role"]), "content": render(m["content"], namespaces)}
            for m in plan.template
        ]
    assert plan.item_reference is not None
    found = lookup(plan.item_reference, namespaces)
    if isinstance(found, str):
        return [{"role": "user", "content": found}]
    if not isinstance(found, list):
        raise GraderFailed("invalid_variable_error", f"{plan.item_reference} is not messages")
    try:
        return [
            {"role": _chat_role(m["role"]), "content": content_text(m.get("content", ""))}
            for m in found
        ]
    except (TypeError, KeyError, ValueError) as exc:
        raise GraderFailed("invalid_variable_error", f"{plan.item_reference}: {exc}") from None


def _chat_role(role: str) -> str:
    return "system" if role == "developer" else role
