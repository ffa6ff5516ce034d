"""The GRPO family's promise, one window of fixed rollouts at a time: whatever cuts the window's
completions into micro-batches (b, K), or an out-of-memory re-plan, the accumulated gradient is
the gradient of the loss type's window objective in one forward, to 1e-5 of its largest entry.

12 completions (3 prompts x 4) of 1 to 40 tokens, four of them truncated (masked), one group of
zero advantages, old log-probs off the policy by N(0, 0.3) so that the clip fires, and a KL term
(β 0.04) against a perturbed reference. One window at (12, 1), (5, 3) (micro-batches of 5, 5 and
2 completions: a group cut) and (1, 12). The gradient of a run is read from one SGD step (lr 10,
no clipping, constant schedule): g = (W0 - W1) / lr. The usual mistakes miss by far more than 1e-2.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from tests.trainer_core.grpo_rollouts import (
    LENGTHS,
    SECOND_WINDOW_LENGTHS,
    Grads,
    gradient_of,
    make_rollouts,
    policy_loss,
    reference_gradient,
    relative_gap,
    starting_model,
    token_terms,
)
from tests.trainer_core.helpers import final_weights
from trainer_core import accumulation
from trainer_core.accumulation import rollout_micro_step
from trainer_core.data.grpo import Rollouts, collate_rollouts, group_advantages, rollout_split
from trainer_core.spec.grpo import PolicyLoss
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

LR = 10.0
ONE_STEP: dict[str, Any] = {"optim": "sgd", "learning_rate": LR, "max_grad_norm": 0.0, "max_steps": 1,
            "lr_scheduler_type": "constant", "validation_split_percentage": 0,
            "group_by_length": False, "max_seq_length": 128, "seed": 5}  # fmt: skip
LOSS_TYPES = ("dapo", "grpo", "dr_grpo")
BACKENDS = ("pytorch", "accelerate", "trainer")
SHAPES = [(12, 1), (5, 3), (1, 12)]
BOUND = 1e-5


def grpo_spec(**changes: Any) -> JobSpec:
    """The run's settings; its dataset is never read (the rollouts train instead)."""
    return JobSpec(model="builtin:tiny-chat", dataset="builtin:chat-arithmetic", task="causal-lm",
                   **(ONE_STEP | changes))  # fmt: skip


@pytest.fixture(scope="module")
def rollouts() -> Rollouts:
    return make_rollouts(grpo_spec())


@pytest.fixture(scope="module")
def references(rollouts: Rollouts) -> dict[str, Grads]:
    return {name: reference_gradient(grpo_spec(), rollouts, policy_loss(name))
            for name in LOSS_TYPES}  # fmt: skip


@pytest.fixture(scope="module")
def initial() -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in starting_model(grpo_spec()).state_dict().items()}


def step_gradient(
    rollouts: Rollouts, loss_type: str, out: Path, initial: dict[str, torch.Tensor], **spec: Any
) -> tuple[Grads, dict[str, Any]]:
    """The gradient the run's one optimizer step applied, and the run's epoch record."""
    split = rollout_split(rollouts, policy_loss(loss_type))
    result = train(grpo_spec(**spec), out, resume=False, rollouts=split)
    assert result.status == "completed" and result.summary["optimizer_steps"] == 1
    after = final_weights(out)
    return {name: (initial[name] - after[name]) / LR for name in after}, result.metrics[-1]


CASES = [(t, backend, b, k) for t in LOSS_TYPES for backend in BACKENDS for b, k in SHAPES]


@pytest.mark.parametrize(("loss_type", "backend", "b", "k"), CASES)
def test_one_window_is_one_gradient(
    rollouts: Rollouts, references: dict[str, Grads], initial: dict[str, torch.Tensor],
    tmp_path: Path, loss_type: str, backend: str, b: int, k: int,
) -> None:  # fmt: skip
    grads, _ = step_gradient(rollouts, loss_type, tmp_path, initial, backend=backend,
                             per_device_train_batch_size=b, gradient_accumulation_steps=k)  # fmt: skip
    gap = relative_gap(grads, references[loss_type])
    print(f"{loss_type} {backend} ({b},{k}): {gap:.1e}")
    assert gap <= BOUND


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_re_plan_that_halves_b_mid_window_gives_the_same_gradient(
    rollouts: Rollouts, references: dict[str, Grads], initial: dict[str, torch.Tensor],
    tmp_path: Path, backend: str, loss_type: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The window's second micro-batch of 5 runs out of memory after the first back-propagated:
    the window restarts at (1, 15) (the largest b below 5 that divides the effective batch of
    15) and its gradient is still the window's."""
    calls: list[int] = []

    def out_of_memory(rows: int) -> None:
        calls.append(rows)
        if len(calls) == 2 and rows > 1:
            raise torch.OutOfMemoryError("failpoint: the second micro-batch does not fit")

    monkeypatch.setattr(accumulation, "check_out_of_memory", out_of_memory)
    split = rollout_split(rollouts, policy_loss(loss_type))
    spec = grpo_spec(backend=backend, per_device_train_batch_size=5, gradient_accumulation_steps=3)
    result = train(spec, tmp_path, resume=False, rollouts=split)
    assert result.summary["micro_batch_size"] == 1 and calls[:3] == [5, 5, 1]
    after = final_weights(tmp_path)
    grads = {name: (initial[name] - after[name]) / LR for name in after}
    assert relative_gap(grads, references[loss_type]) <= BOUND


def test_the_metrics_are_window_means(
    rollouts: Rollouts, initial: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    """The clip fired on some tokens (not all), KL and completion length are their means over
    the window's trained tokens and all its completions, and train_loss is the objective."""
    _, record = step_gradient(rollouts, "grpo", tmp_path, initial, per_device_train_batch_size=5,
                              gradient_accumulation_steps=3)  # fmt: skip
    assert 0.05 < record["clip_ratio"] < 0.95
    assert record["completion_length"] == pytest.approx(sum(LENGTHS) / len(LENGTHS), rel=1e-6)
    assert record["kl"] > 0 and record["train_items"] == 8  # completions that carry loss
    model = starting_model(grpo_spec())
    with torch.no_grad():
        terms = token_terms(model, rollouts, policy_loss("grpo"))
    objective = sum(float(s) / n for s, n in terms if n) / 8
    assert record["train_loss"] == pytest.approx(objective, rel=1e-5)


def control_gradient(
    rollouts: Rollouts, loss_type: str, mistake: str, sizes: tuple[int, ...] = (5, 5, 2)
) -> Grads:
    """The usual loops on the same window, micro-batches of ``sizes`` completions (K = 3)."""
    model = starting_model(grpo_spec())
    counting = mistake == "truncated_counted"
    loss = policy_loss(loss_type, mask_truncated_completions=not counting)
    terms = token_terms(model, rollouts, loss)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    chunks = [terms[start : start + size] for start, size in zip(starts, sizes, strict=True)]
    total = torch.zeros(())
    if mistake == "micro_batch_token_mean":  # TRL's bnpo used as dapo
        for chunk in chunks:
            total = (
                total + sum((s for s, _ in chunk), total * 0) / max(sum(n for _, n in chunk), 1) / 3
            )
    elif mistake == "micro_batch_sequence_mean":  # grpo as TRL on unequal micro-batches
        for chunk in chunks:
            total = total + sum((s / max(n, 1) for s, n in chunk), total * 0) / len(chunk) / 3
    elif mistake == "generation_batch_tokens":  # two windows per generation (trl#5619)
        others = sum(n for n in SECOND_WINDOW_LENGTHS if n < 40)
        total = sum((s for s, _ in terms), total) / (sum(n for _, n in terms) + others)
    else:  # truncated tokens in the count (trl#6439), their loss masked
        masked = token_terms(model, rollouts, policy_loss(loss_type))
        total = sum((s for s, _ in masked), total) / sum(n for _, n in terms)
    return gradient_of(model, total)


@pytest.mark.parametrize(
    ("loss_type", "mistake"),
    [("dapo", "micro_batch_token_mean"), ("grpo", "micro_batch_sequence_mean"),
     ("dapo", "generation_batch_tokens"), ("dapo", "truncated_counted")],
)  # fmt: skip
def test_the_usual_mistakes_miss_by_far(
    rollouts: Rollouts, references: dict[str, Grads], loss_type: str, mistake: str
) -> None:
    gap = relative_gap(control_gradient(rollouts, loss_type, mistake), references[loss_type])
    print(f"negative control {loss_type} {mistake}: {gap:.1e}")
    assert gap > 1e-2


@pytest.mark.parametrize(
    ("loss_type", "mistake"),
    [("dapo", "micro_batch_token_mean"), ("grpo", "micro_batch_sequence_mean")],
)
def test_the_per_micro_batch_means_pass_only_when_nothing_varies(
    loss_type: str, mistake: str
) -> None:
    """The same two loops on completions all of 20 tokens (none truncated) cut 4, 4, 4: they
    give the window's gradient, so the misses above come from unequal lengths and micro-batches,
    not from the test's own noise."""
    equal = make_rollouts(grpo_spec(), lengths=[20] * 12)
    reference = reference_gradient(grpo_spec(), equal, policy_loss(loss_type))
    gap = relative_gap(control_gradient(equal, loss_type, mistake, (4, 4, 4)), reference)
    assert gap <= BOUND


def test_bnpo_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="'bnpo' is not trained: it divides each micro"):
        PolicyLoss(loss_type="bnpo")


def test_advantages_are_centred_per_group() -> None:
    advantages = group_advantages([1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5], 4, scale=True)
    assert advantages[:4] == pytest.approx([0.8659, -0.8659, 0.8659, -0.8659], abs=1e-4)
    assert list(advantages[4:]) == [0.0] * 4  # equal rewards: no gradient from the group
    unscaled = group_advantages([3.0, 1.0, 2.0, 2.0], 4, scale=False)
    assert list(unscaled) == [1.0, -1.0, 0.0, 0.0]


def test_a_masked_token_cannot_overflow_into_nan(rollouts: Rollouts) -> None:
    """A truncated completion's old log-probs of -200 (exp(200) overflows float32) carry no
    loss: the micro-step's loss and every gradient stay finite, and equal those with -1."""
    grads = []
    for old in (-200.0, -1.0):
        far = [[old] * len(o) if cut else list(o)
               for o, cut in zip(rollouts.old_logps, rollouts.truncated, strict=True)]  # fmt: skip
        split = rollout_split(dataclasses.replace(rollouts, old_logps=far), policy_loss("dapo"))
        batch = collate_rollouts(split, list(range(12)), pad_id=0)
        batch |= {"n_window_items": sum(split.items), "n_window_tokens": sum(split.trained),
                  "n_window_completions": 12}  # fmt: skip
        model = starting_model(grpo_spec())
        step = rollout_micro_step(model, batch, policy_loss("dapo"))
        assert torch.isfinite(step.loss)
        grads.append(gradient_of(model, step.loss))
    assert all(torch.isfinite(g).all() for g in grads[0].values())
    assert relative_gap(grads[0], grads[1]) == 0.0


def test_a_completion_mask_trains_only_its_tokens(rollouts: Rollouts) -> None:
    """The caller's mask (tool output, say) zeroing every token of the four truncated completions
    trains exactly what truncation masking does, without a reference (β 0): the same counts and
    the same gradient."""
    loss = policy_loss("grpo", beta=0.0)
    untruncated = dataclasses.replace(rollouts, truncated=[False] * 12, ref_logps=None,
        completion_mask=[[0 if cut else 1] * len(c) for c, cut in
                         zip(rollouts.completion_ids, rollouts.truncated, strict=True)])  # fmt: skip
    grads = []
    for window in (dataclasses.replace(rollouts, ref_logps=None), untruncated):
        split = rollout_split(window, loss)
        assert list(split.items) == [0 if cut else 1 for cut in rollouts.truncated]
        batch = collate_rollouts(split, list(range(12)), pad_id=0)
        batch |= {"n_window_items": 8, "n_window_tokens": sum(split.trained),
                  "n_window_completions": 12}  # fmt: skip
        model = starting_model(grpo_spec())
        grads.append(gradient_of(model, rollout_micro_step(model, batch, loss).loss))
    assert relative_gap(grads[0], grads[1]) == 0.0
