"""Can the job's states fit one device? Asked at POST, before a job waits in the queue for hours
to fail at its first step: the weights, gradients and optimizer state a device holds
(``trainer_core.spec.memory``: counted from the model's config, torch-free), against the memory of
one training device of this server's workers (``GRADACC_DEVICE_MEMORY_GB``; unset: no check, as on
a CPU box). A job whose states alone exceed it is refused, naming what would make it fit (LoRA,
sharding over N devices, a 4-bit base). Activations and logits are the job's own plan, at its
start (``trainer_core.model.memory_plan``): the POST refuses only a job that could never fit.

The config is the model's own: a built-in real shape's (``builtin:qwen3-8b-shape``), a local
folder's ``config.json``, a hub model's in this server's cache. A model whose config is not at
hand (an uploaded or fine-tuned one, a hub id not cached) or of a family the plan does not count
is not checked here; its start shows the plan all the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gradacc.errors import InvalidRequest
from gradacc.settings import Settings
from gradacc.sources.hub import cached_snapshot
from trainer_core.spec.job import JobSpec
from trainer_core.spec.memory import inventory, state_bytes, ways_to_fit
from trainer_core.spec.shapes import SHAPES
from trainer_core.spec.sources import classify_source

GIB = 2**30


def model_config(value: str) -> Mapping[str, Any] | None:
    """The config of the model ``value`` names, where it is at hand (see the module)."""
    kind = classify_source(value)
    if kind == "builtin":
        return SHAPES.get(value)
    folder: Path | None = None
    if kind == "local":
        folder = Path(value).expanduser()
    elif kind == "hub":
        folder = cached_snapshot(value.partition("@")[0], "model")
    try:
        found = json.loads((folder / "config.json").read_text()) if folder else None
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def check_fits(spec: JobSpec, settings: Settings) -> None:
    """422 naming the first field that would make the job's states fit, when they cannot."""
    if settings.device_memory_gb is None:
        return
    config = model_config(spec.model)
    if config is None or inventory(config) is None:
        return
    device = int(settings.device_memory_gb * GIB)
    shards = spec.num_processes if spec.sharding == "fsdp" else 1
    accumulation = spec.gradient_accumulation_steps or 1
    lora = None if spec.lora is None else (spec.lora.r, tuple(spec.lora.target_modules or ()))
    states = state_bytes(
        config,
        optimizer=spec.optim,
        lora=lora,
        four_bit=spec.load_in_4bit,
        shards=shards,
        accumulation=accumulation,
    )
    if states.total <= device:
        return
    ways = ways_to_fit(
        config,
        device=device,
        optimizer=spec.optim,
        shards=shards,
        lora=spec.lora is not None,
        accumulation=accumulation,
    )
    held = (
        f"weights {states.weights / GIB:.1f}, gradients {states.gradients / GIB:.1f}, optimizer "
        f"{states.optimizer / GIB:.1f} GiB"
    )
    advice = "; or ".join(way for _, way in ways) or "nothing offered here makes it fit"
    raise InvalidRequest(
        f"the model's states need {states.total / GIB:.1f} GiB per device ({held}), more than "
        f"the {settings.device_memory_gb:g} GiB of this server's devices "
        f"(GRADACC_DEVICE_MEMORY_GB); it fits with {advice}",
        param=ways[0][0] if ways else "model",
    )
