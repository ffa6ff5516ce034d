"""The predict server's loaded models: each base model once, LoRA adapters put on it by name, and
an LRU over both (docs/serving.md, "One base, many adapters").

A causal LM's adapter folder (``trainer_core.model.trained``) is not loaded whole: its base is
found by what it is made from (``base_key``: a built-in name and seed, a hub id, or the files of
``base/``), loaded once, and its adapter added to it under a name of its own. Two LoRA jobs on one
base then cost one base and two small adapters. ``Loaded.activate()`` makes a model's adapter the
active one (or turns them all off for the base itself) before it is used: every ``Loaded`` of a
base shares one module tree. Other folders (whole models, a classifier's adapters with their
head) load whole, as a base without adapters.

Evicting a base drops its adapters with it; evicting the last adapter of a base unwraps it again
to a plain model. A ``Loaded`` is good until the next ``get`` evicts what it names: take and
use it under the engine's lock, or ``pin()`` it while rows of it run or wait (the batcher does,
per batch): the LRU passes over pinned models, going over its capacity when every one is pinned
(logged), and trims back at the next ``get`` after they are unpinned.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from trainer_core.builtin.models import builtin_tokenizer
from trainer_core.model.trained import (
    add_adapter,
    base_key,
    build_builtin,
    is_adapter,
    load_base,
    load_trained,
    model_key,
    stored_labels,
)

BaseKey = tuple[object, ...]  # what the base is made from, causal or not, and its device
log = logging.getLogger(__name__)
_PINS = threading.Lock()  # pins are taken and released on any thread


_UNKNOWN = "\0unknown"  # no adapter is known to be active (one was added or removed since)


@dataclass
class Base:
    model: Any  # plain, or the PeftModel holding its adapters once one is on it
    adapters: set[str] = field(default_factory=set)
    active: str | None = _UNKNOWN  # what the last activate() put on (None: adapters off)
    pins: int = 0  # pins of its models (itself and its adapters): not evicted while above 0


@dataclass
class Loaded:
    """One model to answer with: its base (shared), the tokenizer saved with it, and the adapter
    that makes the base this model (None: the base alone)."""

    base: Base
    tokenizer: Any
    device: torch.device
    adapter: str | None = None
    pins: int = 0  # holders that have rows of it running or waiting: not evicted meanwhile

    def pin(self) -> None:
        """Keep this model (and its base) loaded until ``unpin()``: rows of it are in use."""
        with _PINS:
            self.pins += 1
            self.base.pins += 1

    def unpin(self) -> None:
        with _PINS:
            self.pins -= 1
            self.base.pins -= 1

    @property
    def model(self) -> Any:
        """The base's module tree, adapters and all: ``activate()`` before using it."""
        return self.base.model

    def activate(self) -> None:
        """Make this model the one the shared module tree computes: its adapter alone, or no
        adapter at all (the base itself, or a whole model that carries adapters of others)."""
        base = self.base
        if not base.adapters or base.active == self.adapter:
            return  # a plain model, or already this one (a batch's next step: nothing to walk)
        if self.adapter is None:
            base.model.base_model.disable_adapter_layers()
        else:
            base.model.base_model.enable_adapter_layers()
            base.model.set_adapter(self.adapter, inference_mode=True)
        base.active = self.adapter


class ModelCache:
    """At most ``capacity`` bases and ``adapter_capacity`` adapters loaded, the least recently
    used first out; ``base_loads`` and ``adapter_loads`` count what was read from disk (or made,
    for a built-in base)."""

    def __init__(self, capacity: int, adapter_capacity: int = 16) -> None:
        self.capacity, self.adapter_capacity = capacity, adapter_capacity
        self._bases: OrderedDict[BaseKey, Base] = OrderedDict()
        self._adapters: OrderedDict[tuple[BaseKey, str], Loaded] = OrderedDict()
        self._views: dict[tuple[object, ...], tuple[BaseKey, Loaded]] = {}
        self.base_loads = 0
        self.adapter_loads = 0

    @property
    def loads(self) -> int:
        return self.base_loads + self.adapter_loads

    def stats(self) -> dict[str, int]:
        return {
            "base_loads": self.base_loads,
            "adapter_loads": self.adapter_loads,
            "bases": len(self._bases),
            "adapters": len(self._adapters),
        }

    def get(self, folder: Path, *, causal: bool, device: torch.device) -> Loaded:
        """The model in ``folder``: an adapter on its shared base, or whole."""
        view = (str(folder), causal, str(device))
        if view not in self._views:
            if causal and is_adapter(folder):
                self._views[view] = self._with_adapter(folder, device)
            else:
                self._views[view] = self._whole(folder, causal, device)
        return self._use(view)

    def builtin(self, name: str, seed: int, device: torch.device) -> Loaded:
        """A built-in causal LM made from ``seed``: the same base as its LoRA jobs' of that seed."""
        view = ("builtin", name, seed, str(device))
        if view not in self._views:
            key = ("builtin", name, seed, True, str(device))
            tokenizer = builtin_tokenizer(name)
            make = lambda: build_builtin(name, seed, AutoModelForCausalLM, {}, tokenizer)  # noqa: E731
            self._views[view] = (key, Loaded(self._base(key, make, device), tokenizer, device))
        return self._use(view)

    def _whole(self, folder: Path, causal: bool, device: torch.device) -> tuple[BaseKey, Loaded]:
        kind: Any = AutoModelForCausalLM if causal else AutoModelForSequenceClassification
        labels = stored_labels(folder)
        # A classifier's adapters carry their own head: loaded whole, by folder, never shared.
        made_of = ("folder", str(folder)) if is_adapter(folder) else model_key(folder)
        key = (*made_of, causal, str(device))
        make = lambda: load_trained(folder, kind, label_kwargs=labels, merge=False)  # noqa: E731
        base = self._base(key, make, device)
        return key, Loaded(base, AutoTokenizer.from_pretrained(folder), device)

    def _with_adapter(self, folder: Path, device: torch.device) -> tuple[BaseKey, Loaded]:
        key = (*base_key(folder), True, str(device))
        make = lambda: load_base(folder, AutoModelForCausalLM, label_kwargs={})  # noqa: E731
        base = self._base(key, make, device)
        name = "adapter_" + hashlib.sha256(str(folder).encode()).hexdigest()[:16]
        base.model = add_adapter(base.model, folder, name).to(device).eval()
        base.adapters.add(name)
        base.active = _UNKNOWN
        self.adapter_loads += 1
        loaded = Loaded(base, AutoTokenizer.from_pretrained(folder), device, name)
        self._adapters[(key, name)] = loaded
        return key, loaded

    def _base(self, key: BaseKey, make: Any, device: torch.device) -> Base:
        if key not in self._bases:
            self._bases[key] = Base(make().to(device).eval())
            self.base_loads += 1
        return self._bases[key]

    def _use(self, view: tuple[object, ...]) -> Loaded:
        """``view``'s model, marked most recently used (its base and adapter), then the LRU
        trimmed of unpinned models (never what ``view`` names: it is the newest)."""
        key, loaded = self._views[view]
        self._bases.move_to_end(key)
        if loaded.adapter is not None:
            self._adapters.move_to_end((key, loaded.adapter))
        _trim(self._bases, self.capacity, key, self._drop_base, "bases")
        _trim(
            self._adapters,
            self.adapter_capacity,
            (key, loaded.adapter),
            lambda pair: self._drop_adapter(*pair),
            "adapters",
        )
        return loaded

    def _drop_base(self, key: BaseKey) -> None:
        del self._bases[key]
        for pair in [pair for pair in self._adapters if pair[0] == key]:
            del self._adapters[pair]
        self._forget(lambda k, _: k == key)

    def _drop_adapter(self, key: BaseKey, name: str) -> None:
        del self._adapters[(key, name)]
        base = self._bases[key]
        base.adapters.discard(name)
        base.active = _UNKNOWN
        if base.adapters:
            base.model.delete_adapter(name)
        else:  # its last adapter: a plain model again (no LoRA layers left to run)
            base.model = base.model.base_model.unload()
        self._forget(lambda k, loaded: k == key and loaded.adapter == name)

    def _forget(self, gone: Any) -> None:
        for view in [v for v, (k, loaded) in self._views.items() if gone(k, loaded)]:
            del self._views[view]


def _trim(
    entries: OrderedDict[Any, Any], capacity: int, keep: Any, drop: Callable[[Any], None], what: str
) -> None:
    """Drop the least recently used unpinned entries (never ``keep``, the one just asked for)
    until ``capacity``; over it, with a warning, while every other one is in use."""
    while len(entries) > capacity:
        free = [k for k, entry in entries.items() if not entry.pins and k != keep]
        if not free:
            log.warning(
                "%d %s loaded, over the %d allowed: every other one is in use",
                len(entries),
                what,
                capacity,
            )
            return
        drop(free[0])
