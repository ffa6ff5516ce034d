"""The predict server's loaded models: a bounded LRU of models read from disk (whole, or as a
base with its adapters: ``trainer_core.model.trained``)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from trainer_core.model.trained import load_trained, stored_labels


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    device: torch.device


class ModelCache:
    """At most ``capacity`` models loaded, whole or as a base with adapters (a folder holding
    adapters: ``trainer_core.model.trained``); the least recently used one goes first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._loaded: OrderedDict[tuple[str, bool, str], Loaded] = OrderedDict()
        self.loads = 0  # how many times a model was read from disk (for tests and the bench)

    def get(self, folder: Path, *, causal: bool, device: torch.device) -> Loaded:
        key = (str(folder), causal, str(device))
        if key in self._loaded:
            self._loaded.move_to_end(key)
            return self._loaded[key]
        tokenizer = AutoTokenizer.from_pretrained(folder)
        kind: Any = AutoModelForCausalLM if causal else AutoModelForSequenceClassification
        # A LoRA model loads as its base and the adapters kept apart (the core's rule), the
        # shape in which many adapters could later share one loaded base.
        model = load_trained(folder, kind, label_kwargs=stored_labels(folder), merge=False)
        model = model.to(device).eval()
        self.loads += 1
        self._loaded[key] = Loaded(model, tokenizer, device)
        while len(self._loaded) > self.capacity:
            self._loaded.popitem(last=False)
        return self._loaded[key]
