"""The predict server's models and the one thread that uses them: the predictions-table loop and
the OpenAI endpoint's request threads share the loaded models through the batcher
(``worker.predict.batcher``), which decodes concurrent requests' rows of one model together and
runs every other use of the models (a load, a classifier) between its steps.

torch and transformers are imported when a model is first wanted (``worker.predict.server``
imports them beside its loop), so building an Engine costs nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from gradacc.serving.resolve import BUILTIN_SEED, ServedModel
from gradacc.settings import Settings
from worker.predict.render import RenderLimits

if TYPE_CHECKING:
    import torch

    from worker.predict.batcher import Batcher
    from worker.predict.cache import Loaded, ModelCache

T = TypeVar("T")


class Engine:
    def __init__(self, settings: Settings, device: Callable[[], torch.device]) -> None:
        self.settings, self.device = settings, device
        self.lock = threading.Lock()  # held while a model is loaded or used
        self.limits = RenderLimits(
            timeout_s=settings.predict_render_timeout_s,
            memory_bytes=settings.predict_render_memory_mb * 2**20,
        )
        self._cache: ModelCache | None = None
        self._batcher: Batcher | None = None
        self._making = threading.Lock()  # two first requests make one batcher

    @property
    def batcher(self) -> Batcher:
        with self._making:
            if self._batcher is None:
                from worker.predict.batcher import Batcher

                self._batcher = Batcher()
            return self._batcher

    def on_models(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the batcher's thread between decode steps, with ``lock`` held: nothing
        else touches the models then (a load may add an adapter to a base a batch is using)."""

        def locked() -> T:
            with self.lock:
                return fn()

        return self.batcher.call(locked)

    @property
    def cache(self) -> ModelCache:
        if self._cache is None:
            from worker.predict.cache import ModelCache

            self._cache = ModelCache(
                self.settings.predict_cache_models, self.settings.predict_cache_adapters
            )
        return self._cache

    def load(self, served: ServedModel) -> Loaded:
        """The model ``served`` names, loaded once (call with ``lock`` held; ``activate()`` it
        before use: a base's models share its modules). A built-in model is the base its LoRA
        jobs of the default seed were trained on: one copy serves both."""
        device = self.device()
        if served.folder is not None:
            return self.cache.get(served.folder, causal=True, device=device)
        assert served.builtin is not None
        return self.cache.builtin(served.builtin, BUILTIN_SEED, device)
