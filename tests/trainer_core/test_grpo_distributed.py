"""The GRPO family over 2 CPU ranks (torchrun, gloo): one window of fixed rollouts trained by 2
ranks gives the gradient of one forward over the window, for every loss type in every backend.

The window is the test's first 11 completions (3 of them truncated), so shares are uneven: at 2
ranks x (2, 3) global micro-batches of 4, 4 and 3 completions, the last split 1 and 2, each share
of very unequal lengths; at 2 ranks x (5, 2) micro-batches of 10 and 1, where one rank has no
completion and runs a stand-in of weight 0. Each rank divides by N_W / 2 and DDP's average makes
it N_W: the ranks' shares are never weighted by their own counts.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_core.grpo_rollouts import (
    first,
    make_rollouts,
    policy_loss,
    reference_gradient,
    relative_gap,
    starting_model,
)
from tests.trainer_core.helpers import final_weights
from tests.trainer_core.test_distributed import train_on_two_ranks
from tests.trainer_core.test_grpo_exactness import BACKENDS, LOSS_TYPES, LR, grpo_spec

WINDOW = 11
# (loss type, backend, b, K) trained by 2 ranks in one launch (imports paid once).
TWO_RANKS = [(t, backend, 2, 3) for t in LOSS_TYPES for backend in BACKENDS] + [
    (t, "pytorch", 5, 2) for t in LOSS_TYPES
]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, int, int], Path]:
    root = tmp_path_factory.mktemp("grpo-ddp")
    rollouts = dataclasses.asdict(first(make_rollouts(grpo_spec()), WINDOW))
    outs = {job: root / "-".join(map(str, job)) for job in TWO_RANKS}
    jobs = [{"spec": grpo_spec(backend=backend, per_device_train_batch_size=b,
                               gradient_accumulation_steps=k, num_processes=2,
                               device="cpu").model_dump(),
             "out": str(outs[(t, backend, b, k)]), "rollouts": rollouts,
             "loss": policy_loss(t).model_dump()}
            for t, backend, b, k in TWO_RANKS]  # fmt: skip
    train_on_two_ranks(root, jobs)
    return outs


@pytest.fixture(scope="module")
def references() -> dict[str, Any]:
    rollouts = first(make_rollouts(grpo_spec()), WINDOW)
    return {t: reference_gradient(grpo_spec(), rollouts, policy_loss(t)) for t in LOSS_TYPES}


@pytest.mark.parametrize(("loss_type", "backend", "b", "k"), TWO_RANKS)
def test_two_ranks_give_the_window_gradient(
    two_ranks: dict[tuple[str, str, int, int], Path], references: dict[str, Any],
    loss_type: str, backend: str, b: int, k: int,
) -> None:  # fmt: skip
    out = two_ranks[(loss_type, backend, b, k)]
    before = starting_model(grpo_spec()).state_dict()
    after = final_weights(out)
    grads = {name: (before[name] - after[name]) / LR for name in after}
    gap = relative_gap(grads, references[loss_type])
    print(f"2 ranks x ({b},{k}) {backend} {loss_type}: {gap:.1e}")
    assert gap <= 1e-5
    report: dict[str, Any] = json.loads((out / "comm.json").read_text())
    assert report["syncs"] == 1  # one all-reduce for the window
    assert report["metrics"][0]["train_samples"] == WINDOW  # each completion once, none twice
