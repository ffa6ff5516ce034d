"""Evaluation on preference pairs: the loss and DPO's metrics over every validation pair.

Means over the pairs (the RPO term a mean over the chosen trained tokens), against the cached
reference of the eval split (``loop.dpo``: computed from the starting weights, whichever way the
training's reference runs). Names as the step records', under the ``eval_`` prefix.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer_core.accumulation import IGNORE_INDEX, PAIR_METRICS, pair_losses, token_nll
from trainer_core.data.load import PreferenceSplit
from trainer_core.data.pairs import collate_pairs
from trainer_core.distributed import World, shard, sum_over_ranks
from trainer_core.loop.context import RunContext
from trainer_core.loop.dpo import pair_loss


@torch.inference_mode()
def _sums(ctx: RunContext, split: PreferenceSplit, rows: list[int]) -> dict[str, torch.Tensor]:
    """Σ over ``rows`` of each pair's loss and metrics, the chosen NLL and its tokens."""
    loss = pair_loss(ctx.spec)
    reference = split.reference[ctx.spec.model]
    sums: dict[str, torch.Tensor] = {}
    size = ctx.spec.per_device_eval_batch_size
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        batch = collate_pairs(split, chunk, ctx.pad_id, reference)
        tensors = {k: v.to(ctx.device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
        logits = ctx.model(input_ids=tensors["input_ids"],
                           attention_mask=tensors["attention_mask"]).logits  # fmt: skip
        nll = token_nll(logits, tensors["labels"])
        trained = (tensors["labels"][:, 1:] != IGNORE_INDEX).sum(-1)
        losses, metrics = pair_losses(-nll.sum(-1), tensors["ref_logps"], trained, loss)
        parts = {"loss": losses, "nll": nll[: len(chunk)].sum(-1), "tokens": trained[: len(chunk)]}
        for name, value in (parts | metrics).items():
            sums[name] = sums.get(name, 0) + value.double().sum()
    return sums


def evaluate_pairs(ctx: RunContext, world: World) -> dict[str, Any]:
    """``eval_loss`` and ``eval_rewards/...``, ``eval_logps/...`` over the eval split."""
    split = ctx.data.eval
    assert isinstance(split, PreferenceSplit)
    was_training = ctx.model.training
    ctx.model.train(False)  # eval mode (``eval()`` is untyped)
    try:
        sums = _sums(ctx, split, shard(list(range(len(split))), world))
    finally:
        ctx.model.train(was_training)
    names = ["loss", "nll", "tokens", *PAIR_METRICS]
    # host sync: once per evaluation; every rank's share, a rank with none adds zeros
    totals = dict(zip(names, sum_over_ranks([float(sums.get(n, 0)) for n in names], world),
                      strict=True))  # fmt: skip
    pairs = len(split)
    eval_loss = totals["loss"] / pairs
    if ctx.spec.rpo_alpha:
        eval_loss += ctx.spec.rpo_alpha * totals["nll"] / max(totals["tokens"], 1)
    metrics = {f"eval_{n}": totals[n] / pairs for n in names[3:]}
    return {"eval_loss": eval_loss} | metrics
