"""The peers' 2026 normalisation bugs, each a negative control on one window of our data: the wrong
rule misses the reference gradient by a measured gap, where ours does not (docs/core.md, "What the
peers got wrong"). The reference is one forward over the whole window; ours accumulates the same
window cut into micro-batches (and ranks) by our plans. tiny-chat's GPT-2, fp32.

1. A loss already divided by the window's tokens divided by K again: TRL's chunked NLL on a model
   that does not accept loss kwargs (unsloth PR #8261).
2. Packed DPO weighting pairs by micro-batch: a mean per micro-batch, then / K (ms-swift #10144).
3. A sequence mean under packing taking a packed row for one sequence (tunix PR #1662).
4. A distillation loss normalised per micro-batch: at micro-batch 1, a sum of per-sequence token
   means instead of the window's token mean (verl #7200).
5. A rank's denominator multiplied by the ranks instead of divided: W² too small (verl PR #5798).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer_core.dpo_pairs import pairs_file, reference_gradient, start
from tests.trainer_core.helpers import CHAT, make_spec
from tests.trainer_core.test_packing_exactness import N_W, PAD, ROWS, _gradient, _window
from trainer_core.accumulation import IGNORE_INDEX, PairLoss, forward_inputs, pair_micro_step
from trainer_core.data.dpo import PreferencePlan
from trainer_core.data.loader import EpochPlan
from trainer_core.distributed import World
from trainer_core.model.load import load_model, load_tokenizer

OURS = 1e-5  # ours, relative to the reference's largest entry (fp32 round-off)
GAP = 1e-2  # the wrong rule misses by more than this


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    spec = make_spec(CHAT)
    torch.manual_seed(0)
    return load_model(spec, load_tokenizer(spec), None).train()


@pytest.fixture(scope="module")
def reference(model: torch.nn.Module) -> torch.Tensor:
    return _gradient(model, _window(len(ROWS)))  # the window's token mean, one forward


def miss(grad: torch.Tensor, reference: torch.Tensor, label: str = "") -> float:
    gap = float((grad - reference).abs().max() / reference.abs().max())
    print(f"{label}: {gap:.2e}")  # the figures in docs/core.md (pytest -s)
    return gap


def test_a_loss_divided_by_k_again(model: torch.nn.Module, reference: torch.Tensor) -> None:
    """Already Σ/N_W per micro-step; a trainer that divides by K again is K times too small."""
    ours = _gradient(model, _window(3))
    wrong = _gradient(model, _window(3), scale=1 / 4)  # K = 4 micro-batches of 3 rows
    assert miss(ours, reference, "k again, ours") <= OURS
    assert miss(wrong, reference, "k again, wrong") >= 0.7  # 1 - 1/K


def test_packed_dpo_weighting_pairs_by_micro_batch(tmp_path: Path) -> None:
    """Four pairs in a window of micro-batches of 3 and 1 (b 3, K 2): a mean per micro-batch
    weights the lone pair three times the others; ours divides every pair by the window's 4."""
    spec = make_spec(CHAT, dataset=str(pairs_file(tmp_path, count=4)), method="dpo",
                     validation_split_percentage=0)  # fmt: skip
    loss = PairLoss(spec.dpo_beta)
    expected = torch.cat([g.flatten() for g in reference_gradient(spec, loss).values()])
    grads = {}
    for rule in ("ours", "per micro-batch"):
        model, split, pad = start(spec)
        plan = PreferencePlan(split, reference=split.reference[spec.model], batch_size=3,
                              accumulation=2, seed=spec.seed, pad_id=pad)  # fmt: skip
        sizes = []
        for batch in (plan[i] for i in range(len(plan))):
            step = pair_micro_step(model, batch, loss, None)
            sizes.append(batch["n_rows"])
            share = step.loss if rule == "ours" else step.loss * batch["n_window_items"] / (
                batch["n_rows"] * 2)  # fmt: skip
            share.backward()  # type: ignore[no-untyped-call]
        assert sizes == [3, 1]
        grads[rule] = torch.cat([p.grad.flatten() for p in model.parameters()
                                 if p.grad is not None])  # fmt: skip
    assert miss(grads["ours"], expected, "packed dpo, ours") <= OURS
    assert miss(grads["per micro-batch"], expected, "packed dpo, wrong") >= GAP


def _token_losses(
    model: torch.nn.Module, batch: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's summed trained-token loss and its trained tokens (with gradients)."""
    logits = model(**forward_inputs(batch)).logits[:, :-1].float()
    labels = batch["labels"][:, 1:]
    losses = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none",
        ignore_index=IGNORE_INDEX,
    ).view(labels.shape)  # fmt: skip
    return losses.sum(-1), (labels != IGNORE_INDEX).sum(-1)


def _grad_of(model: torch.nn.Module, loss: torch.Tensor) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    return grads


def test_a_sequence_mean_taking_a_packed_row_for_a_sequence(
    model: torch.nn.Module, reference: torch.Tensor
) -> None:
    """Twelve rows packed into micro-batches of 4 (3 packed rows): ours, a token mean, equals
    the padded window; a sequence mean over the packed rows misses the sequence mean over the
    twelve sequences."""
    plan = EpochPlan(ROWS, batch_size=4, accumulation=3, seed=1, pad_id=PAD, packing="bins")
    packed = [plan[i] for i in range(len(plan))]
    assert miss(_gradient(model, packed), reference, "sequence mean, ours packed") <= OURS
    sums, tokens = _token_losses(model, _window(len(ROWS))[0])
    right = _grad_of(model, (sums / tokens).mean())  # each of the 12 sequences' token mean
    parts = [_token_losses(model, batch) for batch in packed]
    means = torch.cat([s / t for s, t in parts])  # a packed row's "sequence" mean
    wrong = _grad_of(model, means.mean())
    assert means.numel() < len(ROWS)  # rows were packed together
    assert miss(wrong, right, "sequence mean, wrong") >= GAP


def test_a_distillation_loss_normalised_per_micro_batch(
    model: torch.nn.Module, reference: torch.Tensor
) -> None:
    """Micro-batches of one answer (b 1, K 12): ours is the window's token mean; a token mean
    per micro-batch, / K, is the mean of the answers' token means instead."""
    window = _window(1)
    ours = _gradient(model, window)
    model.zero_grad(set_to_none=True)
    for batch in window:
        sums, tokens = _token_losses(model, batch)
        (sums.sum() / tokens.sum() / len(window)).backward()  # type: ignore[no-untyped-call]
    wrong = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    assert miss(ours, reference, "distillation, ours") <= OURS
    assert miss(wrong, reference, "distillation, wrong") >= GAP


def test_a_rank_denominator_multiplied_by_the_ranks(
    model: torch.nn.Module, reference: torch.Tensor
) -> None:
    """Two ranks, each its share of every micro-batch (b 3 each, K 2: the twelve rows are one
    window), DDP averaging their gradients: ours divides N_W by W and the average is the
    window's; multiplying by W instead leaves it W² = 4 times too small."""
    grads: dict[str, list[torch.Tensor]] = {"ours": [], "times W": []}
    for rank in (0, 1):
        plan = EpochPlan(ROWS, batch_size=3, accumulation=2, seed=1, pad_id=PAD,
                         world=World(rank=rank, size=2))  # fmt: skip
        batches = [plan[i] for i in range(len(plan))]
        assert {batch["n_window_items"] for batch in batches} == {N_W / 2}
        grads["ours"].append(_gradient(model, batches))
        grads["times W"].append(_gradient(model, batches, scale=1 / 4))  # N_W·W, not N_W / W
    averaged = {rule: (g[0] + g[1]) / 2 for rule, g in grads.items()}
    assert miss(averaged["ours"], reference, "ranks, ours") <= OURS
    assert miss(averaged["times W"], reference, "ranks, wrong") >= 0.7
