"""DPO over 2 CPU ranks (torchrun, gloo) and over 2 epochs: 2 ranks x (2, 3) give the gradient of
one forward over the window in every backend (a rank's share is whole pairs; in the ragged last
micro-batch of 3 pairs one rank holds 1 and the other 2), and (b, K) trains as (b·K, 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_core.dpo_pairs import pairs_file, reference_gradient, relative_gap
from tests.trainer_core.helpers import (
    final_weights,
    initial_weights,
    max_abs_diff,
    run,
    tolerance,
)
from tests.trainer_core.test_distributed import train_on_two_ranks
from tests.trainer_core.test_dpo_exactness import BACKENDS, LOSSES, LR, dpo_spec, pair_loss

# (backend, loss) trained by 2 ranks in one launch (imports paid once).
TWO_RANKS = [(backend, loss) for backend in BACKENDS for loss in LOSSES]  # every cell


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pairs_file(tmp_path_factory.mktemp("pairs"))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory, data: Path) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("dpo-ddp")
    outs = {job: root / "-".join(job) for job in TWO_RANKS}
    jobs = [{"spec": dpo_spec(data, loss, backend=backend, per_device_train_batch_size=2,
                              gradient_accumulation_steps=3, num_processes=2,
                              device="cpu").model_dump(), "out": str(outs[(backend, loss)])}
            for backend, loss in TWO_RANKS]  # fmt: skip
    train_on_two_ranks(root, jobs)
    return outs


@pytest.mark.parametrize(("backend", "loss"), TWO_RANKS)
def test_two_ranks_give_the_window_gradient(
    two_ranks: dict[tuple[str, str], Path], data: Path, backend: str, loss: str
) -> None:
    out = two_ranks[(backend, loss)]
    spec = dpo_spec(data, loss)
    before, after = initial_weights(spec), final_weights(out)
    grads = {name: (before[name] - after[name]) / LR for name in after}
    gap = relative_gap(grads, reference_gradient(spec, pair_loss(spec)))
    print(f"2 ranks x (2,3) {backend} {loss}: {gap:.1e}")
    assert gap <= 1e-5
    report: dict[str, Any] = json.loads((out / "comm.json").read_text())
    assert report["syncs"] == 1  # one all-reduce for the window
    assert report["metrics"][0]["train_samples"] == 11  # every pair once, none duplicated


@pytest.mark.parametrize("backend", BACKENDS)
def test_b_k_trains_as_bk_1_over_two_epochs(
    tmp_path_factory: pytest.TempPathFactory, backend: str
) -> None:
    """23 pairs, clipping, a linear schedule: windows of 8 pairs, the last one of 7 (ragged at
    b = 2). Weights within the core's tolerance, losses and metrics alike. SGD, whose update is
    the gradient: under AdamW the attention's key bias, whose gradient is 0 but for fp32
    round-off (softmax ignores a constant added to every key), moves by ±lr on that round-off
    alone, in any loop (measured: 2.6e-5 against a bound of 1.7e-5 here; SGD: 1.3e-7 against
    1.6e-4)."""
    data = pairs_file(tmp_path_factory.mktemp("pairs23"), count=23, seed=1)
    common: dict[str, Any] = {"optim": "sgd", "learning_rate": 1.0, "max_grad_norm": 1.0,
                              "max_steps": None, "num_train_epochs": 2, "backend": backend,
                              "lr_scheduler_type": "linear"}  # fmt: skip
    runs = {}
    for b, k in ((2, 4), (8, 1)):
        spec = dpo_spec(data, "sigmoid+rpo", per_device_train_batch_size=b,
                        gradient_accumulation_steps=k, **common)  # fmt: skip
        out = tmp_path_factory.mktemp(f"traj-{backend}-{b}x{k}")
        metrics = run(spec, out, resume=False).metrics
        runs[(b, k)] = (final_weights(out), metrics, spec)
    reference, metrics, spec = runs[(8, 1)]
    bound = tolerance(initial_weights(spec), reference)
    weights, other, _ = runs[(2, 4)]
    assert bound > 1e-6 and max_abs_diff(weights, reference) <= bound
    for mine, theirs in zip(other, metrics, strict=True):
        for name in ("train_loss", "rewards/margins", "rewards/accuracies", "logps/chosen"):
            assert mine[name] == pytest.approx(theirs[name], rel=1e-4, abs=1e-6), name
        assert 0 <= mine["rewards/accuracies"] <= 1
