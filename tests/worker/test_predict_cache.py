"""The predict server's model cache holds at most GRADACC_PREDICT_CACHE_MODELS models, least
recently used out first; a cached model is not read again."""

from __future__ import annotations

from pathlib import Path

import torch

from trainer_core.spec.job import JobSpec
from trainer_core.train import train
from worker.predict.cache import ModelCache


def test_least_recently_used_model_goes_first(tmp_path: Path) -> None:
    folders = []
    for seed in (1, 2):
        spec = JobSpec(model="builtin:tiny-bert", dataset="builtin:sentiment", max_steps=1,
                       max_train_samples=16, max_eval_samples=4, seed=seed)  # fmt: skip
        train(spec, tmp_path / str(seed))
        folders.append(tmp_path / str(seed) / "model")
    cache = ModelCache(capacity=1)
    cpu = torch.device("cpu")
    first = cache.get(folders[0], causal=False, device=cpu)
    assert cache.get(folders[0], causal=False, device=cpu) is first and cache.loads == 1
    cache.get(folders[1], causal=False, device=cpu)  # evicts the first
    assert cache.loads == 2
    assert cache.get(folders[0], causal=False, device=cpu) is not first and cache.loads == 3
    big = ModelCache(capacity=2)
    for folder in (*folders, *folders):
        big.get(folder, causal=False, device=cpu)
    assert big.loads == 2
