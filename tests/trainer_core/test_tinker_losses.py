"""The Tinker losses on values worked by hand (loss and gradient, clipped and not), the
cross-entropy a raw signed weighted sum equal to torch's, and a window's normalisation the same
however its datums are cut into chunks and calls and in whatever order they come."""

from __future__ import annotations

import math
import random

import pytest
import torch

from trainer_core.tinker_losses import (
    Window,
    check_inputs,
    datum_loss,
    loss_tokens,
    target_logprobs,
)

HALF, QUARTER = math.log(0.5), math.log(0.25)  # p and q: r = exp(p - q) = 2


def _loss_and_grad(loss: str, p: float, q: float, a: float, **config: float) -> tuple[float, float]:
    logprob = torch.tensor([p], requires_grad=True)
    inputs = {"logprobs": torch.tensor([q]), "advantages": torch.tensor([a])}
    value = datum_loss(loss, logprob, inputs, config)
    value.backward()
    assert logprob.grad is not None
    return float(value.detach()), float(logprob.grad[0])


@pytest.mark.parametrize(
    ("loss", "advantage", "config", "expected"),
    [
        # -r A, d/dp = -r A
        ("importance_sampling", 1.0, {}, (-2.0, -2.0)),
        # r = 2 above hi 1.2 with A > 0: the clipped term wins, no gradient
        ("ppo", 1.0, {}, (-1.2, 0.0)),
        # A < 0: min(-2, -1.2) = -2, the unclipped term: loss 2, d/dp = -r A = 2
        ("ppo", -1.0, {}, (2.0, 2.0)),
        # bounds from the call's config: hi 3 leaves r = 2 unclipped
        ("ppo", 1.0, {"clip_low_threshold": 0.5, "clip_high_threshold": 3.0}, (-2.0, -2.0)),
        # -stopgrad(clamp(r)) p A: clamp(2) = 1.2, loss -1.2 p, d/dp = -1.2
        ("cispo", 1.0, {}, (-1.2 * HALF, -1.2)),
        # -(p A - beta/2 (p - q)^2), d/dp = -(A - beta (p - q))
        ("dro", 1.0, {"beta": 0.5},
         (-(HALF - 0.25 * math.log(2) ** 2), -(1.0 - 0.5 * math.log(2)))),
    ],
)  # fmt: skip
def test_each_loss_equals_its_value_worked_by_hand(
    loss: str, advantage: float, config: dict[str, float], expected: tuple[float, float]
) -> None:
    value, grad = _loss_and_grad(loss, HALF, QUARTER, advantage, **config)
    assert value == pytest.approx(expected[0], abs=1e-6)
    assert grad == pytest.approx(expected[1], abs=1e-6)


def test_per_token_bounds_come_before_the_calls() -> None:
    p = torch.tensor([HALF], requires_grad=True)
    inputs = {"logprobs": torch.tensor([QUARTER]), "advantages": torch.tensor([1.0]),
              "clip_high_threshold": torch.tensor([1.5])}  # fmt: skip
    value = datum_loss("ppo", p, inputs, {"clip_high_threshold": 3.0})
    assert float(value.detach()) == pytest.approx(-1.5)


def test_cross_entropy_is_a_raw_signed_weighted_sum() -> None:
    torch.manual_seed(0)
    logits = torch.randn(7, 11, requires_grad=True)
    targets = torch.randint(0, 11, (7,))
    weights = torch.tensor([1.0, 0.0, -0.5, 2.0, 0.25, 0.0, -1.0])
    value = datum_loss("cross_entropy", target_logprobs(logits, targets), {"weights": weights}, {})
    per_token = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    expected = float((per_token * weights).sum().detach())
    assert float(value.detach()) == pytest.approx(expected, abs=1e-6)
    assert loss_tokens({"weights": weights}, 7) == 5
    assert loss_tokens({}, 7) == 7


def test_inputs_are_checked_by_name() -> None:
    with pytest.raises(ValueError, match=r"loss_fn_inputs\.advantages"):
        check_inputs("ppo", {"target_tokens": torch.zeros(3), "logprobs": torch.zeros(3)}, 3)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        check_inputs(
            "cross_entropy", {"target_tokens": torch.zeros(3), "weights": torch.zeros(2)}, 3
        )
    with pytest.raises(ValueError, match="loss_fn: one of"):
        check_inputs("mse", {}, 3)


def _datums(count: int) -> list[list[float]]:
    rng = random.Random(3)
    return [[rng.choice([0.0, 1.0, 0.5]) for _ in range(rng.randint(1, 9))] for _ in range(count)]


@pytest.mark.parametrize("mode", ["none", "num_loss_tokens", "num_sequences"])
def test_a_windows_divisor_does_not_depend_on_how_it_was_cut(mode: str) -> None:
    datums = _datums(40)
    counts = [loss_tokens({"weights": torch.tensor(w)}, len(w)) for w in datums]
    whole = Window()
    whole.add({"grad_accumulation_normalization": mode}, counts)
    expected = {"none": 1.0, "num_loss_tokens": float(sum(counts)),
                "num_sequences": float(sum(1 for c in counts if c))}[mode]  # fmt: skip
    assert whole.divisor() == expected
    for cuts in (3, 8):
        order = list(range(40))
        random.Random(cuts).shuffle(order)  # chunks arriving in any order, over two "ranks"
        ranks = [Window(), Window()]
        for i, start in enumerate(range(0, 40, 40 // cuts + 1)):
            chunk = [counts[j] for j in order[start : start + 40 // cuts + 1]]
            config = (
                {"grad_accumulation_normalization": mode} if i % 2 == 0 else {}
            )  # absent: follows
            ranks[i % 2].add(config, chunk)
        ranks[0].merge(ranks[1])
        assert ranks[0].divisor() == expected


def test_calls_that_disagree_are_refused_at_the_step() -> None:
    window = Window()
    window.add({"grad_accumulation_normalization": "num_loss_tokens"}, [3])
    window.add({"grad_accumulation_normalization": "none"}, [2])
    with pytest.raises(ValueError, match="disagree"):
        window.divisor()
    with pytest.raises(ValueError, match="one of none"):
        Window().add({"grad_accumulation_normalization": "tokens"}, [1])
