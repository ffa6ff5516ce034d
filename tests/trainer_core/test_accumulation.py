"""Unit tests of the shared accumulation math: windows, item counts, and the gradient property."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.trainer_core.helpers import reference_plan
from trainer_core.accumulation import MicroBatch, collate, micro_step_loss, summed_loss
from trainer_core.builtin.models import builtin_config, builtin_tokenizer
from trainer_core.data.plan import EpochIndex, epoch_permutation
from trainer_core.data.splits import TokenizedSplit


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    order: list[int] = epoch_permutation(n, seed, epoch).tolist()
    return order


def plan_epoch(order: list[int], items: list[int], b: int, k: int) -> list[MicroBatch]:
    """The core's plan (numpy), checked here against the plain reference too."""
    plan = list(EpochIndex(np.array(order, dtype=np.int64), np.array(items), b, k))
    assert plan == reference_plan(order, items, b, k)
    return plan


@pytest.mark.parametrize("n", [1, 15, 16, 17, 101, 257])
@pytest.mark.parametrize(("b", "k"), [(1, 3), (4, 4), (3, 5), (8, 1)])
def test_windows_of_b_k_match_one_batch_of_bk(n: int, b: int, k: int) -> None:
    order = epoch_order(n, seed=3, epoch=1)
    items = [i % 7 + 1 for i in range(n)]
    small = plan_epoch(order, items, b, k)
    large = plan_epoch(order, items, b * k, 1)
    assert len({m.window for m in small}) == len(large) == math.ceil(n / (b * k))
    for window, big in enumerate(large):
        members = [m for m in small if m.window == window]
        assert [r for m in members for r in m.rows] == big.rows
        assert {m.n_window_items for m in members} == {big.n_window_items}
        assert big.n_window_items == sum(items[r] for r in big.rows)
        assert [m.last_in_window for m in members] == [False] * (len(members) - 1) + [True]


def test_order_depends_on_seed_and_epoch_only() -> None:
    assert epoch_order(50, 1, 0) == epoch_order(50, 1, 0)
    assert epoch_order(50, 1, 0) != epoch_order(50, 1, 1)
    assert epoch_order(50, 1, 0) != epoch_order(50, 2, 0)
    assert sorted(epoch_order(50, 1, 0)) == list(range(50))


def test_collate_causal_masks_padding_and_counts_shifted_tokens() -> None:
    ids = [[5, 6, 7], [8, 9], [4]]
    batch = collate(ids, None, MicroBatch([0, 1, 2], 0, 99, True), pad_id=0)
    assert batch["labels"].tolist() == [[5, 6, 7], [8, 9, -100], [4, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0]]
    assert batch["n_items"] == 2 + 1 + 0  # a row's first token predicts nothing
    assert batch["n_window_items"] == 99


def _tiny_gpt2() -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    tokenizer = builtin_tokenizer("builtin:tiny-gpt2")
    return AutoModelForCausalLM.from_config(builtin_config("builtin:tiny-gpt2", tokenizer))


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_window_gradient_equals_gradient_of_window_mean() -> None:
    """After the window's last backward the gradient is ∇[Σ item losses / N_W], computed here in
    one forward over the whole window as the reference; the classic mean/K gradient is not."""
    g = torch.Generator().manual_seed(1)
    rows = [
        torch.randint(1, 300, (int(n),), generator=g).tolist()
        for n in torch.randint(2, 30, (7,), generator=g)
    ]
    split = TokenizedSplit(rows, None, [len(r) - 1 for r in rows])
    window = plan_epoch(list(range(7)), list(split.items), 2, 4)  # 2+2+2+1 rows
    model = _tiny_gpt2()

    for micro in window:
        micro_step_loss(model, collate(rows, None, micro, 0), causal=True).loss.backward()
    accumulated = _grads(model)

    model.zero_grad()
    whole = collate(rows, None, MicroBatch(list(range(7)), 0, sum(split.items), True), 0)
    logits = model(input_ids=whole["input_ids"], attention_mask=whole["attention_mask"]).logits
    (summed_loss(logits, whole["labels"], causal=True) / sum(split.items)).backward()
    reference = _grads(model)
    assert torch.allclose(accumulated, reference, rtol=1e-4, atol=1e-7)

    model.zero_grad()
    for micro in window:
        b = collate(rows, None, micro, 0)
        out = model(
            input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"]
        )
        (out.loss / 4).backward()
    assert not torch.allclose(_grads(model), reference, rtol=1e-2, atol=1e-5)


def test_logged_loss_keeps_no_graph() -> None:
    """The running loss must not hold a graph alive across micro-steps (memory would grow with K)."""
    rows = [[1, 2, 3, 4], [5, 6, 7]]
    batch = collate(rows, None, MicroBatch([0, 1], 0, 5, True), 0)
    step = micro_step_loss(_tiny_gpt2(), batch, causal=True)
    loss, summed = step.loss, step.summed
    assert loss.requires_grad
    assert not summed.requires_grad and summed.grad_fn is None
    assert float(loss.detach()) == pytest.approx(float(summed) / 5)
