"""``{{ sample.output_text }}``, ``{{ sample.output_json.x }}``, ``{{ item.x }}``: a template's
variables replaced by values looked up, never evaluated (no Jinja, no expressions), so a
template can read the sample and the item and nothing else."""

from __future__ import annotations

import json
import re
from typing import Any

from trainer_core.graders.errors import GraderFailed
from trainer_core.spec.graders import TEMPLATE, VARIABLE

_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def sample_namespace(model_sample: str) -> dict[str, Any]:
    """What ``sample.*`` holds: the text, and its JSON when the text is JSON (else None)."""
    try:
        output_json = json.loads(model_sample)
    except ValueError:
        output_json = None
    return {"output_text": model_sample, "output_json": output_json}


def lookup(name: str, namespaces: dict[str, Any]) -> Any:
    """The value ``item.a.b[0]`` names. A missing step is ``invalid_variable_error``; a step into
    ``sample.output_json`` when the sample is not JSON is ``sample_parse_error``."""
    match = VARIABLE.match(name)
    if match is None:
        raise GraderFailed("invalid_variable_error", f"{name!r} is not item.* or sample.*")
    value: Any = namespaces[match.group(1)]
    walked = match.group(1)
    for key, index in _STEP.findall(match.group(2)):
        if walked == "sample.output_json" and value is None:
            raise GraderFailed("sample_parse_error", "the sample is not JSON: no output_json")
        try:
            value = value[key] if key else value[int(index)]
        except (KeyError, IndexError, TypeError):
            raise GraderFailed("invalid_variable_error", f"{name!r} is not in the data") from None
        walked += f".{key}" if key else f"[{index}]"
    if walked == "sample.output_json" and value is None:
        raise GraderFailed("sample_parse_error", "the sample is not JSON: no output_json")
    return value


def render(template: str, namespaces: dict[str, Any]) -> str:
    """Strings as they are; other values (numbers, lists, objects) as JSON."""

    def one(match: re.Match[str]) -> str:
        value = lookup(match.group(1).strip(), namespaces)
        return value if isinstance(value, str) else json.dumps(value)

    return TEMPLATE.sub(one, template)
