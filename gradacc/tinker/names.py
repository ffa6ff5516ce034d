"""The names a Tinker client gives models: ``org/model``. The built-in causal models are offered
as ``gradacc/<name>`` (``gradacc/tiny-chat`` is ``builtin:tiny-chat``); any other ``org/model``
name is a hub id, loaded where the worker has the hub or its cache. A ``:suffix`` is never part of
a base model's name (the cookbook strips one as a checkpoint's name)."""

from __future__ import annotations

from trainer_core.spec.fields import BUILTIN_MODEL_TASKS
from trainer_core.spec.shapes import SHAPES

ORG = "gradacc"
OFFERED = tuple(
    f"{ORG}/{name.removeprefix('builtin:')}"
    for name, tasks in BUILTIN_MODEL_TASKS.items()
    if "causal-lm" in tasks and name not in SHAPES  # the shapes are sizes, not models
)
MAX_CONTEXT = {"gradacc/small-chat": 2048}


def source_of(name: str) -> str:
    """Where the worker loads ``name`` from; a ValueError naming ``base_model`` when it cannot."""
    if name in OFFERED:
        return "builtin:" + name.removeprefix(f"{ORG}/")
    if name.startswith(f"{ORG}/"):
        offered = ", ".join(OFFERED)
        raise ValueError(f"base_model: {name!r} is not one of this server's models ({offered})")
    org, _, model = name.partition("/")
    if not org or not model or "/" in model or ":" in name:
        raise ValueError(f"base_model: {name!r} is not an org/model name")
    return name


def capabilities() -> list[dict[str, object]]:
    return [
        {
            "model_name": name,
            "max_context_length": MAX_CONTEXT.get(name, 512),
            "trainable": True,
            "sampleable": True,
        }
        for name in OFFERED
    ]
