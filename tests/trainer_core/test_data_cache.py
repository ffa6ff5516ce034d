"""The tokenized-data cache: a hit skips tokenization, a change of tokenizer or max_seq_length
misses, the least recently used entry is evicted first, and a corrupt entry is rebuilt. Also: the
numpy epoch plan equals the plain reference plan, and batches built by a loader worker equal those built on
the training thread."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer_core.helpers import (
    CAUSAL,
    final_weights,
    make_spec,
    max_abs_diff,
    reference_plan,
    run,
)
from trainer_core.data import load as data_module
from trainer_core.data.cache import DataCache
from trainer_core.data.load import JobData, load_job_data
from trainer_core.data.loader import EpochLoader, EpochPlan
from trainer_core.data.plan import EpochIndex, epoch_permutation
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.job import JobSpec

WORDS = [
    "the",
    "film",
    "was",
    "great",
    "dull",
    "fun",
    "story",
    "actor",
    "plot",
    "scene",
    "music",
    "long",
    "short",
    "good",
    "bad",
]


def _csv(path: Path, rows: int = 120) -> Path:
    lines = [f"{' '.join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(5 + i % 20))},{i % 2}"
             for i in range(rows)]  # fmt: skip
    path.write_text("text,label\n" + "\n".join(lines) + "\n")
    return path


def _load(spec: JobSpec, cache: DataCache) -> JobData:
    return load_job_data(spec, load_tokenizer(spec), cache)


def _no_tokenizing(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("the data was loaded and tokenized again")

    monkeypatch.setattr(data_module, "_prepared", fail)


def test_hit_skips_tokenization_and_returns_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = DataCache(tmp_path / "cache")
    spec = JobSpec(model="builtin:tiny-bert", dataset=str(_csv(tmp_path / "d.csv")))
    first = _load(spec, cache)
    assert len(cache.entries()) == 1
    _no_tokenizing(monkeypatch)
    again = _load(spec, cache)
    assert again.train.input_ids == first.train.input_ids
    assert list(again.train.labels or []) == list(first.train.labels or [])
    assert list(again.eval.items) == list(first.eval.items)
    assert again.label_names == first.label_names == ["0", "1"]


def test_miss_when_tokenizer_or_max_seq_length_changes(tmp_path: Path) -> None:
    cache = DataCache(tmp_path / "cache")
    csv = str(_csv(tmp_path / "d.csv"))
    base = _load(JobSpec(model="builtin:tiny-bert", dataset=csv), cache)
    short = _load(JobSpec(model="builtin:tiny-bert", dataset=csv, max_seq_length=8), cache)
    other = _load(JobSpec(model="builtin:tiny-gpt2", dataset=csv), cache)
    assert len(cache.entries()) == 3
    assert (
        max(len(r) for r in short.train.input_ids) == 8 < max(len(r) for r in base.train.input_ids)
    )
    assert other.train.input_ids != base.train.input_ids  # another vocabulary
    csv_changed = _csv(tmp_path / "d.csv", rows=121)  # same path, new content: a miss too
    _load(JobSpec(model="builtin:tiny-bert", dataset=str(csv_changed)), cache)
    assert len(cache.entries()) == 4


def test_least_recently_used_entry_is_evicted(tmp_path: Path) -> None:
    cache = DataCache(tmp_path / "cache")
    specs = [JobSpec(model="builtin:tiny-bert", dataset=str(_csv(tmp_path / f"{i}.csv", 100 + i)))
             for i in range(3)]  # fmt: skip
    _load(specs[0], cache)
    _load(specs[1], cache)
    first, second = sorted(cache.entries(), key=lambda e: e.description["dataset"])
    os.utime(first.path / "manifest.json", (1000, 1000))  # both old, the second older still:
    os.utime(second.path / "manifest.json", (500, 500))
    assert cache.lookup(first.key) is not None  # ...until the first is used again
    # room for two entries (a third is a few bytes larger: one row more), not for three
    cache.max_bytes = first.size_bytes + second.size_bytes + first.size_bytes // 4
    _load(specs[2], cache)
    kept = {e.key for e in cache.entries()}
    assert first.key in kept and second.key not in kept and len(kept) == 2


def test_corrupt_entry_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    cache = DataCache(tmp_path / "cache")
    spec = JobSpec(model="builtin:tiny-bert", dataset=str(_csv(tmp_path / "d.csv")))
    # A copy: the loaded rows map the very file corrupted below.
    clean = [row.tolist() for row in _load(spec, cache).train.input_ids]
    (entry,) = cache.entries()
    arrow = next(entry.path.glob("train*.arrow"))
    raw = bytearray(arrow.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one flipped byte inside the token ids
    arrow.write_bytes(bytes(raw))
    assert cache.lookup(entry.key) is None and not entry.path.exists()
    rebuilt = _load(spec, cache)
    assert [row.tolist() for row in rebuilt.train.input_ids] == clean
    assert cache.lookup(entry.key) is not None


def test_clear_removes_every_entry(tmp_path: Path) -> None:
    cache = DataCache(tmp_path / "cache")
    _load(JobSpec(model="builtin:tiny-bert", dataset=str(_csv(tmp_path / "d.csv"))), cache)
    assert cache.size_bytes() > 0
    assert cache.clear() == 1 and cache.entries() == []


@pytest.mark.parametrize(("n", "b", "k"), [(101, 4, 4), (7, 2, 4), (64, 8, 1), (1, 3, 5)])
def test_numpy_plan_equals_the_reference_plan(n: int, b: int, k: int) -> None:
    items = np.random.default_rng(n).integers(1, 40, n)
    for epoch in range(2):
        permutation = epoch_permutation(n, 7, epoch)
        assert sorted(permutation.tolist()) == list(range(n))
        expected = reference_plan(permutation.tolist(), items.tolist(), b, k)
        assert list(EpochIndex(permutation, items, b, k)) == expected


def _batches(loader: EpochLoader, epoch: int) -> list[dict[str, object]]:
    loader.set_epoch(epoch)
    return list(loader)


def test_worker_built_batches_equal_inline_ones(tmp_path: Path) -> None:
    spec = JobSpec(model="builtin:tiny-gpt2", dataset="builtin:tiny-stories", task="causal-lm")
    split = load_job_data(spec, load_tokenizer(spec)).train
    plans = [EpochPlan(split, batch_size=4, accumulation=3, seed=3, pad_id=0) for _ in range(2)]
    inline, workers = EpochLoader(plans[0]), EpochLoader(plans[1], num_workers=1)
    for plan in plans:
        plan.resume_at(1, 6)  # a resume mid-epoch 1, then a whole epoch 2
    for epoch in (1, 2):
        a, b = _batches(inline, epoch), _batches(workers, epoch)
        assert len(a) == len(b) == len(plans[0]) > 0
        for x, y in zip(a, b, strict=True):
            assert x.keys() == y.keys()
            for key, value in x.items():
                same = (
                    torch.equal(value, y[key])
                    if isinstance(value, torch.Tensor)
                    else value == y[key]
                )
                assert same, (epoch, key)


@pytest.mark.parametrize("backend", ["accelerate", "trainer"])
def test_wrapped_loaders_train_alike_with_a_worker(tmp_path: Path, backend: str) -> None:
    """Accelerate re-wraps the loader and the Trainer calls set_epoch itself: with a worker
    building the batches the weights are the same, bit for bit, over two epochs."""
    spec = make_spec(CAUSAL, backend=backend, max_train_samples=40, max_eval_samples=8)
    run(spec, tmp_path / "inline", loader_workers=0)
    run(spec, tmp_path / "worker", loader_workers=1)
    assert max_abs_diff(final_weights(tmp_path / "inline"), final_weights(tmp_path / "worker")) == 0
