"""Evaluation after each epoch: loss per item, plus accuracy and macro-F1, or perplexity and the
mean token accuracy (argmax over the trained tokens, as OpenAI reports it) for a causal LM."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from trainer_core.accumulation import MicroBatch, collate, summed_loss, token_hits
from trainer_core.data.splits import TokenizedSplit
from trainer_core.distributed import (
    SINGLE,
    World,
    collective_rows,
    gather_lists,
    shard,
    sum_over_ranks,
)


def macro_f1(predictions: list[int], labels: Sequence[int], num_classes: int) -> float:
    scores = []
    for c in range(num_classes):
        tp = sum(1 for p, y in zip(predictions, labels, strict=True) if p == c and y == c)
        fp = sum(1 for p, y in zip(predictions, labels, strict=True) if p == c and y != c)
        fn = sum(1 for p, y in zip(predictions, labels, strict=True) if p != c and y == c)
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return sum(scores) / num_classes


@torch.inference_mode()
def evaluate(
    model: torch.nn.Module,
    split: TokenizedSplit,
    *,
    batch_size: int,
    pad_id: int,
    device: torch.device,
    num_classes: int | None,
    world: World = SINGLE,
    predicted_out: list[int] | None = None,
) -> dict[str, float]:
    """Over the whole eval set; with W ranks each takes a contiguous W-th and they combine.
    ``predicted_out`` receives a classifier's predicted class per eval row."""
    was_training = model.training
    model.eval()
    causal = split.labels is None
    loss_sum = torch.zeros((), device=device)
    hits = torch.zeros((), dtype=torch.long, device=device)
    predictions: list[torch.Tensor] = []
    rows = shard(list(range(len(split))), world)
    for start in range(0, collective_rows(len(split), world, batch_size), batch_size):
        own = rows[start : start + batch_size]
        chunk = MicroBatch(own or [0], 0, 1, True)  # a rank out of rows: a stand-in, dropped
        batch: dict[str, Any] = collate(
            split.input_ids, split.labels, chunk, pad_id, split.loss_mask
        )
        ids = batch["input_ids"].to(device)
        mask = batch["attention_mask"].to(device)
        labels = batch["labels"].to(device)
        logits = model(input_ids=ids, attention_mask=mask).logits
        if not own:
            continue
        loss_sum += summed_loss(logits, labels, causal)
        if causal:
            hits += token_hits(logits, labels)
        else:
            predictions.append(logits.argmax(-1).cpu())
    model.train(was_training)
    # host sync: once per evaluation
    total, correct = sum_over_ranks([loss_sum.item(), float(hits.item())], world)
    items = sum(split.items)
    eval_loss = total / items
    if causal:
        return {
            "eval_loss": eval_loss,
            "eval_perplexity": math.exp(min(eval_loss, 700.0)),
            "eval_mean_token_accuracy": correct / items,
        }
    assert split.labels is not None and num_classes is not None
    # Shards are contiguous and gathered in rank order: the predictions line up with the labels.
    predicted = gather_lists(torch.cat(predictions).tolist() if predictions else [], world)
    if predicted_out is not None:
        predicted_out.extend(predicted)
    accuracy = sum(p == y for p, y in zip(predicted, split.labels, strict=True)) / len(split)
    return {
        "eval_loss": eval_loss,
        "eval_accuracy": accuracy,
        "eval_f1": macro_f1(predicted, split.labels, num_classes),
    }
