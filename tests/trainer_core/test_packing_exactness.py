"""Packing keeps the update exact (issue 35; docs/data.md "Packing"), on one window.

Twelve rows of 3 to 33 tokens with assistant-style masks (a prompt untrained, an answer
trained), tiny-chat's GPT-2, fp32. The reference is one padded forward over the window. Packed
candidates: each micro-batch of (b=2, K=6) and of (b=4, K=3) laid end to end, and the whole
window in one row; and two simulated ranks, each packing its share. Per-token losses must match
the padded run's to 1e-5, the accumulated gradient to 1e-5·max|g|. The negative controls are the
packing bugs peers shipped: each must miss the gradient by more than 1e-2·max|g|.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.trainer_core.helpers import CHAT, make_spec
from trainer_core.accumulation import IGNORE_INDEX, MicroBatch, collate, micro_step_loss
from trainer_core.data.loader import EpochPlan
from trainer_core.data.packing import Layout, pack, place
from trainer_core.data.splits import TokenizedSplit
from trainer_core.distributed import World, shard
from trainer_core.loop.packing_check import check_rows_isolated
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.errors import JobError

LENGTHS = [3, 33, 5, 17, 9, 7, 21, 4, 29, 12, 6, 25]
PAD = 0
Batches = list[dict[str, Any]]


def _rows() -> TokenizedSplit:
    rng = random.Random(7)
    ids, masks = [], []
    for length in LENGTHS:
        ids.append([rng.randrange(3, 60) for _ in range(length)])
        prompt = rng.randint(1, max(1, length // 2))  # the prompt's tokens are not trained
        masks.append([0] * prompt + [1] * (length - prompt))
    items = [sum(mask[1:]) for mask in masks]  # trained tokens after the shift
    return TokenizedSplit(ids, None, items, masks)


ROWS = _rows()
N_W = sum(ROWS.items)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    spec = make_spec(CHAT)
    torch.manual_seed(0)
    loaded = load_model(spec, load_tokenizer(spec), None)
    loaded.train()  # no dropout in the built-in models: train mode, as a run is
    return loaded


def _window(b: int) -> Batches:
    """The window's rows in order, cut into micro-batches of b, padded."""
    order = list(range(len(LENGTHS)))
    cuts = [order[i : i + b] for i in range(0, len(order), b)]
    last = len(cuts) - 1
    masks = ROWS.loss_mask
    return [
        collate(ROWS.input_ids, None, MicroBatch(rows, 0, N_W, i == last), PAD, masks)
        for i, rows in enumerate(cuts)
    ]


def _gradient(model: torch.nn.Module, batches: Batches, scale: float = 1.0) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    for batch in batches:
        (micro_step_loss(model, batch, causal=True).loss * scale).backward()  # type: ignore[no-untyped-call]
    grads = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return torch.cat(grads)


def _token_losses(model: torch.nn.Module, batch: dict[str, Any], **forward: Any) -> torch.Tensor:
    """Each trained target's loss, in (row, position) order: the padded layout reads rows one
    after another, the packed one already lies so."""
    inputs = forward or (
        {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"], "use_cache": False}
        if "position_ids" in batch
        else {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    )
    with torch.no_grad():
        logits = model(**inputs).logits[:, :-1].float()
    labels = batch["labels"][:, 1:]
    losses = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none",
        ignore_index=IGNORE_INDEX,
    )  # fmt: skip
    return losses[labels.reshape(-1) != IGNORE_INDEX]


def _plan_order(flat: torch.Tensor, padded: dict[str, Any], layout: Layout) -> torch.Tensor:
    """A packed batch's token losses in the padded batch's row order (bins go longest first)."""
    lengths = padded["attention_mask"].sum(-1).tolist()
    counts = (padded["labels"][:, 1:] != IGNORE_INDEX).sum(-1).tolist()
    order = [row for rows in place(lengths, layout) for row in rows]
    pieces = torch.split(flat, [counts[row] for row in order])
    chunks = dict(zip(order, pieces, strict=True))
    return torch.cat([chunks[row] for row in range(len(lengths))])


def _miss(grad: torch.Tensor, reference: torch.Tensor) -> float:
    return float((grad - reference).abs().max() / reference.abs().max())


@pytest.fixture(scope="module")
def reference(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    [padded] = _window(len(LENGTHS))  # one forward over the window
    return _gradient(model, [padded]), _token_losses(model, padded)


@pytest.mark.parametrize("layout", ["bins", "one-row"])
@pytest.mark.parametrize("b", [2, 4, 12])
def test_packed_micro_batches_match_the_padded_window(
    model: torch.nn.Module, reference: tuple[torch.Tensor, torch.Tensor], b: int, layout: Layout
) -> None:
    grad_ref, losses_ref = reference
    padded = _window(b)
    packed = [pack(batch, layout) for batch in padded]
    for before, after in zip(padded, packed, strict=True):
        assert after["input_ids"].shape[0] <= before["input_ids"].shape[0]
        if layout == "bins":  # no wider than the longest row: no row is split
            assert after["input_ids"].shape[1] == before["input_ids"].shape[1]
        else:  # one row, no padding at all
            assert after["input_ids"].shape == (1, before["n_tokens"])
    assert (
        sum(batch["input_ids"].numel() for batch in packed)
        < sum(b["input_ids"].numel() for b in padded)
        or b == 2
    )
    assert sum(batch["n_items"] for batch in packed) == N_W
    assert sum(int((batch["labels"] != IGNORE_INDEX).sum()) for batch in packed) == N_W
    losses = torch.cat(
        [
            _plan_order(_token_losses(model, after), before, layout)
            for before, after in zip(padded, packed, strict=True)
        ]
    )
    assert losses.shape == losses_ref.shape
    assert float((losses - losses_ref).abs().max()) <= 1e-5
    assert _miss(_gradient(model, packed), grad_ref) <= 1e-5


def test_two_ranks_each_packing_their_share(
    model: torch.nn.Module, reference: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """Each rank packs its shard of the plan's micro-batches; DDP averages the ranks' sums."""
    grad_ref, _ = reference
    total = torch.zeros_like(grad_ref)
    for rank in range(2):
        plan = EpochPlan(ROWS, batch_size=3, accumulation=2, seed=1, pad_id=PAD,
                         world=World(rank, 2), packing="bins")  # fmt: skip
        batches = [plan[i] for i in range(len(plan))]
        assert all("attention_mask" not in batch for batch in batches)
        total += _gradient(model, batches) / 2
    assert _miss(total, grad_ref) <= 1e-5


def _window_costs(shares: Callable[[EpochPlan, int], list[int]], ranks: int) -> list[int]:
    """Each window's token slots on its busiest rank (the others wait for it at the all-reduce),
    on 256 uneven rows at (b, K) = (4, 2), each rank's rows packed as ``shares`` cut them."""
    rng = random.Random(0)
    lengths = [int(rng.lognormvariate(4, 0.7)) + 3 for _ in range(256)]
    rows = TokenizedSplit([[5] * n for n in lengths], None, [n - 1 for n in lengths],
                          [[0] + [1] * (n - 1) for n in lengths])  # fmt: skip
    plans = [EpochPlan(rows, batch_size=4, accumulation=2, seed=1, pad_id=PAD,
                       world=World(r, ranks), packing="bins") for r in range(ranks)]  # fmt: skip
    index, costs = plans[0].full_plan(0), []
    assert index.window_width is not None
    for first in range(0, len(index), 2):
        load = [0] * ranks
        for i in range(first, min(first + 2, len(index))):
            micro, width = index[i], int(index.window_width[index[i].window])
            cut = [shares(plan, i) for plan in plans]
            on_ranks = sorted(row for own in cut for row in own)
            assert on_ranks == sorted(micro.rows)  # each row on one rank, once
            for r, own in enumerate(cut):
                batch = collate(rows.input_ids, None, MicroBatch(own, 0, 1, True), PAD,
                                rows.loss_mask)  # fmt: skip
                load[r] += pack(batch, "bins", width)["input_ids"].numel()
        costs.append(max(load))
    return costs


def test_ranks_take_whole_bins_in_turn() -> None:
    """Each rank's share of a packed micro-batch is whole bins, the fuller share going to the
    ranks in turn (``data.pack_plan``). Negative control: the same micro-batches' rows cut in
    equal counts, as a padded run cuts them, load the busiest rank more."""
    planned = _window_costs(lambda plan, i: plan.full_plan(0).share(i, plan.world), 2)
    halves = _window_costs(lambda plan, i: shard(plan.full_plan(0)[i].rows, plan.world), 2)
    print(f"busiest rank's slots: plan {sum(planned)}, equal row counts {sum(halves)}")
    assert sum(planned) < 0.95 * sum(halves)


def _mutated(mutate: Callable[[dict[str, Any]], dict[str, Any]], b: int = 4) -> Batches:
    return [mutate(pack(batch, "one-row")) for batch in _window(b)]


def _cache_left_on(batch: dict[str, Any]) -> dict[str, Any]:
    return batch | {"use_cache": True}


def _first_labels_in(batch: dict[str, Any]) -> dict[str, Any]:
    padded_first = batch["position_ids"] == 0
    labels = torch.where(padded_first, batch["input_ids"], batch["labels"])
    labels[0, 0] = IGNORE_INDEX  # the packed row's own first token predicts nothing
    return batch | {"labels": labels}


class _Forwarding(torch.nn.Module):
    """The model called as a packing bug calls it (the cache left on, or an all-ones mask)."""

    def __init__(self, model: torch.nn.Module, how: str) -> None:
        super().__init__()
        self.inner, self.how = model, how

    def forward(self, **inputs: Any) -> Any:
        if self.how == "cache":
            inputs["use_cache"] = True
        else:
            inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
        return self.inner(**inputs)


@pytest.mark.parametrize("how", ["cache", "all-ones mask"])
def test_negative_control_rows_that_attend_across(
    model: torch.nn.Module, reference: tuple[torch.Tensor, torch.Tensor], how: str
) -> None:
    grad_ref, _ = reference
    leaky = _Forwarding(model, how)
    packed = [pack(batch, "one-row") for batch in _window(4)]  # rows in plan order
    assert _miss(_gradient(leaky, packed), grad_ref) > 1e-2
    forward = {"use_cache": True} if how == "cache" else {}
    batch = packed[0]
    inputs = {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"], **forward}
    if how != "cache":
        inputs["attention_mask"] = torch.ones_like(batch["input_ids"])
    losses = _token_losses(model, batch, **inputs)
    first = _token_losses(model, _window(4)[0])
    assert float((losses - first).abs().max()) > 1e-2  # a clearly different token loss


def test_negative_control_first_labels_left_in(
    model: torch.nn.Module, reference: tuple[torch.Tensor, torch.Tensor]
) -> None:
    grad_ref, _ = reference
    batches = _mutated(_first_labels_in)
    extra = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in batches) - N_W
    assert extra > 0  # cross-row targets: a row's last token trained to predict the next row
    assert _miss(_gradient(model, batches), grad_ref) > 1e-2


def test_negative_control_packing_the_dataset_before_the_sampler(model: torch.nn.Module) -> None:
    """TRL-style packing: rows packed in dataset order into fixed packs, then the packs are
    shuffled into windows. The first window then holds other rows than the plan's first window,
    so its update differs (and no choice of tolerance can fix that)."""
    plan = EpochPlan(ROWS, batch_size=2, accumulation=2, seed=3, pad_id=PAD, packing="bins")
    planned = [plan[i] for i in range(2)]  # the plan's first window: 4 rows
    window_rows = sorted(r for i in range(2) for r in plan.full_plan(0)[i].rows)
    packs = [list(range(i, i + 2)) for i in range(0, len(LENGTHS), 2)]  # consecutive pairs
    order = torch.randperm(len(packs), generator=torch.Generator().manual_seed(3)).tolist()
    dataset_rows = sorted(r for p in order[:2] for r in packs[p])  # the same 4-row window size
    assert dataset_rows != window_rows  # window membership changed
    items = sum(ROWS.items[r] for r in dataset_rows)
    batches = [pack(collate(ROWS.input_ids, None, MicroBatch(packs[p], 0, items, i == 1), PAD,
                            ROWS.loss_mask)) for i, p in enumerate(order[:2])]  # fmt: skip
    assert _miss(_gradient(model, batches), _gradient(model, planned)) > 1e-2


def test_a_model_that_lets_packed_rows_mix_is_refused_by_name(model: torch.nn.Module) -> None:
    cpu = torch.device("cpu")
    for layout in ("bins", "one-row"):
        check_rows_isolated(model, cpu, "builtin:tiny-chat", layout)  # isolates: no error
    for how in ("cache", "all-ones mask"):
        with pytest.raises(JobError, match="builtin:tiny-chat does not isolate packed") as error:
            check_rows_isolated(_Forwarding(model, how), cpu, "builtin:tiny-chat", "bins")
        assert error.value.param == "packing"
