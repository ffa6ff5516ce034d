"""An eval's ``data_source_config``: the shape of its items, as OpenAI answers it (a JSON schema
of ``item`` and, where runs sample a model or carry samples, ``sample``).

- ``custom``: the caller's ``item_schema``; a run's items are checked against it.
- ``stored_completions``: items as a stored chat completion reads, ``{"input": [messages],
  "output": ..., "metadata": ...}``; a run names them ``{{item.input}}``. The items come from a
  file (an export made a file, docs/imports.md), not from completions kept on this server.
- ``logs`` is not served: this server keeps no request logs to query.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from gradacc.errors import InvalidRequest

SAMPLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "model": {"type": "string"},
        "choices": {"type": "array"},
        "output_text": {"type": "string"},
    },
    "required": ["output_text"],
}
STORED_ITEM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {"type": "array", "items": {"type": "object"}},
        "output": {},
        "metadata": {"type": "object"},
    },
    "required": ["input"],
}


def parse_config(raw: Any) -> dict[str, Any]:
    """The config as OpenAI answers it, or a 400 naming the field."""
    where = "data_source_config"
    if not isinstance(raw, dict):
        raise InvalidRequest("an object with a type", param=where)
    kind = raw.get("type")
    if kind == "custom":
        schema = raw.get("item_schema")
        if not isinstance(schema, dict):
            raise InvalidRequest("a JSON schema object", param=f"{where}.item_schema")
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise InvalidRequest(
                f"not a JSON schema: {exc.message}", param=f"{where}.item_schema"
            ) from None
        sampled = bool(raw.get("include_sample_schema", False))
        return {"type": "custom", "schema": _wrapped(schema, sampled)}
    if kind == "stored_completions":
        metadata = raw.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidRequest("an object", param=f"{where}.metadata")
        found = {"type": "stored_completions", "schema": _wrapped(STORED_ITEM, True)}
        return found | ({"metadata": metadata} if metadata else {})
    if kind == "logs":
        raise InvalidRequest(
            "'logs' is not served: this server keeps no request logs; use 'custom' or "
            "'stored_completions' with a file of items",
            param=f"{where}.type",
        )
    raise InvalidRequest("one of 'custom', 'stored_completions'", param=f"{where}.type")


def _wrapped(item: dict[str, Any], sampled: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {"item": item}
    if sampled:
        properties["sample"] = SAMPLE_SCHEMA
    return {"type": "object", "properties": properties, "required": ["item"]}


def item_errors(config: dict[str, Any], item: Any) -> str | None:
    """Why ``item`` does not fit the eval's item schema (None: it fits)."""
    schema = config["schema"]["properties"]["item"]
    error = next(iter(Draft202012Validator(schema).iter_errors(item)), None)
    if error is None:
        return None
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"item{path}: {error.message}"
