"""DPO's promise, one window at a time: whatever cuts a window's pairs into micro-batches (b, K),
ranks or an out-of-memory re-plan, the accumulated gradient is the gradient of one forward over
the whole window, ∇[(1/N) Σ loss_j + alpha (1/T) Σ nll], to 1e-5 of its largest entry.

11 pairs with completions of 3 to 44 trained tokens make one window at (4, 3) (micro-batches of 4, 4
and 3 pairs), (1, 11) and 2 ranks x (2, 3). The gradient of a run is read from one SGD step
(lr 10, no clipping, constant schedule): g = (W0 - W1) / lr. The negative controls (the usual
per-micro-batch mean divided by K, an RPO term averaged per micro-batch) miss the same check by
far more than 1e-2, and a micro-batch that splits a pair is refused before any forward.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer_core.dpo_pairs import (
    Grads,
    gradient,
    pairs_file,
    reference_gradient,
    relative_gap,
    start,
    window_terms,
)
from tests.trainer_core.helpers import final_weights, initial_weights, run
from trainer_core import accumulation
from trainer_core.accumulation import PairLoss, PairSplit, pair_micro_step
from trainer_core.data.dpo import collate_pairs
from trainer_core.spec.job import JobSpec

LR = 10.0
ONE_STEP: dict[str, Any] = {"optim": "sgd", "learning_rate": LR, "max_grad_norm": 0.0, "max_steps": 1,
            "lr_scheduler_type": "constant", "validation_split_percentage": 0,
            "group_by_length": False, "max_seq_length": 128, "seed": 5}  # fmt: skip
LOSSES: dict[str, dict[str, Any]] = {
    "sigmoid": {},
    "ipo": {"dpo_loss": "ipo"},
    "sigmoid+rpo": {"rpo_alpha": 0.5},
}
BACKENDS = ("pytorch", "accelerate", "trainer")
BOUND = 1e-5


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pairs_file(tmp_path_factory.mktemp("pairs"))


def dpo_spec(data: Path, loss: str, **changes: Any) -> JobSpec:
    return JobSpec(model="builtin:tiny-chat", dataset=str(data), task="causal-lm", method="dpo",
                   **(ONE_STEP | LOSSES[loss] | changes))  # fmt: skip


def pair_loss(spec: JobSpec) -> PairLoss:
    return PairLoss(spec.dpo_beta, spec.dpo_loss, spec.rpo_alpha)


@pytest.fixture(scope="module")
def references(data: Path) -> dict[str, Grads]:
    return {name: reference_gradient(dpo_spec(data, name), pair_loss(dpo_spec(data, name)))
            for name in LOSSES}  # fmt: skip


def step_gradient(spec: JobSpec, out: Path) -> Grads:
    """The gradient the run's one optimizer step applied."""
    result = run(spec, out, resume=False)
    assert result.status == "completed" and result.summary["optimizer_steps"] == 1
    before, after = initial_weights(spec), final_weights(out)
    return {name: (before[name] - after[name]) / LR for name in after}


# Every loss in every backend at (4, 3), ragged, and (1, 11), one pair per micro-batch.
WINDOWS = [
    (loss, backend, b, k) for loss in LOSSES for backend in BACKENDS for b, k in [(4, 3), (1, 11)]
]


@pytest.mark.parametrize(("loss", "backend", "b", "k"), WINDOWS)
def test_one_window_is_one_gradient(
    data: Path, references: dict[str, Grads], tmp_path: Path, loss: str, backend: str, b: int,
    k: int,
) -> None:  # fmt: skip
    spec = dpo_spec(data, loss, backend=backend, per_device_train_batch_size=b,
                    gradient_accumulation_steps=k)  # fmt: skip
    gap = relative_gap(step_gradient(spec, tmp_path), references[loss])
    print(f"{loss} {backend} ({b},{k}): {gap:.1e}")
    assert gap <= BOUND


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_re_plan_that_halves_b_mid_window_gives_the_same_gradient(
    data: Path, references: dict[str, Grads], tmp_path: Path, backend: str, loss: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The window's second micro-batch of 4 pairs runs out of memory, after the first has
    back-propagated: the window restarts at (2, 6) and its gradient is still the window's."""
    calls: list[int] = []

    def out_of_memory(pairs: int) -> None:
        calls.append(pairs)
        if len(calls) == 2 and pairs > 2:
            raise torch.OutOfMemoryError("failpoint: the second micro-batch does not fit")

    monkeypatch.setattr(accumulation, "check_out_of_memory", out_of_memory)
    spec = dpo_spec(data, loss, backend=backend, per_device_train_batch_size=4,
                    gradient_accumulation_steps=3)  # fmt: skip
    result = run(spec, tmp_path, resume=False)
    assert result.summary["micro_batch_size"] == 2 and calls[:3] == [4, 4, 2]
    before, after = initial_weights(spec), final_weights(tmp_path)
    grads = {name: (before[name] - after[name]) / LR for name in after}
    assert relative_gap(grads, references[loss]) <= BOUND


@pytest.mark.parametrize("loss", ["sigmoid", "sigmoid+rpo"])
def test_online_reference_gives_the_cached_gradient(
    data: Path, references: dict[str, Grads], tmp_path: Path, loss: str
) -> None:
    spec = dpo_spec(data, loss, per_device_train_batch_size=4, gradient_accumulation_steps=3,
                    reference_logprobs="online")  # fmt: skip
    assert relative_gap(step_gradient(spec, tmp_path), references[loss]) <= BOUND


def test_every_pair_starts_at_ln_2(data: Path, tmp_path: Path) -> None:
    """Policy = reference at step 0: every margin is 0 and every sigmoid loss ln 2, in the
    training's micro-batches (b = 4) against the reference cached 16 pairs a forward."""
    spec = dpo_spec(data, "sigmoid")
    model, split, pad = start(spec)
    with torch.no_grad():
        for first in range(0, len(split), 4):
            rows = list(range(first, min(first + 4, len(split))))
            losses, _, _ = window_terms(model, split, pad, rows, pair_loss(spec),
                                        split.reference[spec.model])  # fmt: skip
            assert (losses - math.log(2)).abs().max() <= 1e-6, losses
    # The run's first window (all 11 pairs) measures its loss before its step: ln 2 as well.
    one_window = dpo_spec(data, "sigmoid", per_device_train_batch_size=4,
                          gradient_accumulation_steps=3)  # fmt: skip
    assert run(one_window, tmp_path).metrics[0]["train_loss"] == pytest.approx(math.log(2),
                                                                                 abs=1e-6)  # fmt: skip


def control_gradient(spec: JobSpec, b: int, k: int, mistake: str) -> Grads:
    """The usual loops on the same window: ``mean_over_k`` back-propagates each micro-batch's
    mean pair loss / K; ``nll_per_micro_batch`` the RPO term as each micro-batch's token mean / K
    (pair losses right)."""
    model, split, pad = start(spec)
    loss, rows = pair_loss(spec), list(range(len(split)))
    for first in range(0, len(rows), b):
        chunk = rows[first : first + b]
        losses, nll, tokens = window_terms(model, split, pad, chunk, loss,
                                           split.reference[spec.model])  # fmt: skip
        if mistake == "mean_over_k":
            total = losses.mean() / k + (loss.rpo_alpha or 0.0) * nll / tokens / k
        else:
            total = losses.sum() / len(rows) + (loss.rpo_alpha or 0.0) * nll / tokens / k
        total.backward()  # type: ignore[no-untyped-call]
    return gradient(model)


@pytest.mark.parametrize(
    ("loss", "mistake"),
    [("sigmoid", "mean_over_k"), ("ipo", "mean_over_k"), ("sigmoid+rpo", "nll_per_micro_batch")],
)
def test_the_usual_mistakes_miss_by_far(
    data: Path, references: dict[str, Grads], loss: str, mistake: str
) -> None:
    gap = relative_gap(control_gradient(dpo_spec(data, loss), 4, 3, mistake), references[loss])
    print(f"negative control {loss} {mistake}: {gap:.1e}")
    assert gap > 1e-2


def test_a_micro_batch_that_splits_a_pair_is_refused(data: Path) -> None:
    """A planner that cuts the 2N sequences rather than the N pairs puts pair 1's chosen in one
    micro-batch and its rejected in the next: refused before the forward, naming the pairs."""
    spec = dpo_spec(data, "sigmoid")
    model, split, pad = start(spec)
    batch = collate_pairs(split, [0, 1], pad, split.reference[spec.model])
    batch["pair_ids"] = torch.tensor([0, 1, 0, 2])  # chosen of 0 and 1, rejected of 0 and 2
    batch |= {"n_window_items": 3, "n_window_tokens": 10}
    with pytest.raises(PairSplit, match=r"chosen of pairs \[0, 1\] and rejected of \[0, 2\]"):
        pair_micro_step(model, batch, pair_loss(spec), None)
    with pytest.raises(PairSplit):
        batch["pair_ids"] = torch.tensor([0, 1, 0])
        pair_micro_step(model, batch, pair_loss(spec), None)
