"""What an evaluation shows beyond its scalars, to tell what the model gets wrong:

- classification: per-class precision, recall, F1 and support, the confusion matrix (rows: the
  true label, columns: the predicted one) and up to ``eval_sample_count`` misclassified eval rows;
- causal LM and chat: up to ``eval_sample_count`` eval rows continued greedily (at most
  ``eval_sample_max_new_tokens`` new tokens): the prompt, the reference and the output. A chat
  (or prompt-completion) row's prompt is everything before its first trained token and the
  reference is that trained span; a plain text row's prompt is its first half. Samples are
  generated within a time budget (``SampleBudget``): the first and last evaluations always have
  them, the others when they cost at most 3 % of the run's time so far.

One report per evaluation, written by rank 0 as a line of ``evaluations.jsonl`` (newest last).
Generation runs under ``torch.random.fork_rng`` with a fixed seed, in eval mode, so it leaves the
training's random state untouched: a run with reports trains exactly as one without.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from trainer_core.data.splits import TokenizedSplit

SAMPLE_SEED = 0


def classification_report(
    predicted: Sequence[int], labels: Sequence[int], names: Sequence[str]
) -> dict[str, Any]:
    n = len(names)
    matrix = [[0] * n for _ in range(n)]
    for p, y in zip(predicted, labels, strict=True):
        matrix[int(y)][int(p)] += 1
    per_class = {}
    for c, name in enumerate(names):
        tp = matrix[c][c]
        support = sum(matrix[c])
        predicted_c = sum(row[c] for row in matrix)
        precision = tp / predicted_c if predicted_c else 0.0
        recall = tp / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[name] = {"precision": precision, "recall": recall, "f1": f1, "support": support}
    return {"labels": list(names), "per_class": per_class, "confusion_matrix": matrix}


def misclassified(
    split: TokenizedSplit,
    predicted: Sequence[int],
    names: Sequence[str],
    tokenizer: Any,
    count: int,
) -> list[dict[str, Any]]:
    assert split.labels is not None
    rows = [i for i, p in enumerate(predicted) if int(p) != int(split.labels[i])][:count]
    return [
        {
            "row": i,
            "text": tokenizer.decode(
                [int(t) for t in split.input_ids[i]], skip_special_tokens=True
            ),
            "label": names[int(split.labels[i])],
            "predicted": names[int(predicted[i])],
        }
        for i in rows
    ]


def _prompt_and_reference(split: TokenizedSplit, row: int) -> tuple[list[int], list[int]]:
    ids = [int(t) for t in split.input_ids[row]]
    if split.loss_mask is not None:
        mask = [int(m) for m in split.loss_mask[row]]
        start = next((i for i, m in enumerate(mask) if m), len(ids))
        end = next((i for i in range(start, len(mask)) if not mask[i]), len(ids))
        return ids[: max(start, 1)], ids[max(start, 1) : end]
    half = max(1, len(ids) // 2)
    return ids[:half], ids[half:]


def _positions(model: Any) -> int:
    config = model.config
    for name in ("n_positions", "max_position_embeddings"):
        if isinstance(getattr(config, name, None), int):
            return int(getattr(config, name))
    return 1 << 30


@torch.inference_mode()
def generated_samples(
    model: Any,
    split: TokenizedSplit,
    tokenizer: Any,
    *,
    device: torch.device,
    count: int,
    max_new_tokens: int,
) -> list[dict[str, Any]]:
    """Greedy continuations of the first ``count`` eval rows, in one batch (left-padded, so every
    prompt ends where generation starts; a row stops at the end-of-sequence token)."""
    rows = [(row, *_prompt_and_reference(split, row)) for row in range(min(count, len(split)))]
    width = max((len(prompt) for _, prompt, _ in rows), default=0)
    new_tokens = min(max_new_tokens, _positions(model) - width)  # a position table ends
    if not rows or new_tokens <= 0:
        return []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (_, prompt, _) in enumerate(rows):
        ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[i, width - len(prompt) :] = 1
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(SAMPLE_SEED)
        out = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
        )
    model.train(was_training)
    samples = []
    for i, (row, prompt, reference) in enumerate(rows):
        new = out[i, width:].tolist()
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id in new:
            new = new[: new.index(tokenizer.eos_token_id)]
        samples.append(
            {
                "row": row,
                "prompt": tokenizer.decode(prompt, skip_special_tokens=False),
                "reference": tokenizer.decode(reference, skip_special_tokens=True),
                "output": tokenizer.decode(new, skip_special_tokens=True),
            }
        )
    return samples


class SampleBudget:
    """Generating samples at every evaluation would dominate a tiny job (a model of 50k
    parameters takes longer to write 64 tokens than to train an epoch). The first and the last
    evaluation always get samples; one in between gets them when the time spent generating so
    far, plus what the last generation took, stays within ``share`` of the run's time."""

    def __init__(self, share: float = 0.03) -> None:
        self.share, self.spent = share, 0.0
        self.last: float | None = None
        self.started = time.perf_counter()

    def allows(self, final: bool) -> bool:
        if final or self.last is None:
            return True
        return self.spent + self.last <= self.share * (time.perf_counter() - self.started)

    def spend(self, seconds: float) -> None:
        self.spent += seconds
        self.last = seconds


def evaluation_report(
    ctx: Any, predicted: Sequence[int], budget: SampleBudget, *, final: bool
) -> dict[str, Any]:
    """The report of one evaluation of ``ctx``'s model (a ``RunContext``); ``final``: the run's
    last evaluation."""
    spec, split = ctx.spec, ctx.data.eval
    count = spec.eval_sample_count
    if ctx.data.label_names:
        names = ctx.data.label_names
        assert split.labels is not None
        return {
            "classification": classification_report(predicted, split.labels, names),
            "misclassified": misclassified(split, predicted, names, ctx.tokenizer, count),
        }
    if count == 0 or ctx.tokenizer is None:
        return {"samples": []}
    if spec.sharding == "fsdp":  # rank 0 alone cannot run a sharded model: its forward gathers
        return {"samples": None}
    if not budget.allows(final):
        return {"samples": None}  # skipped: within the time budget, the next evaluation has them
    started = time.perf_counter()
    samples = generated_samples(
        ctx.model,
        split,
        ctx.tokenizer,
        device=ctx.device,
        count=count,
        max_new_tokens=spec.eval_sample_max_new_tokens,
    )
    budget.spend(time.perf_counter() - started)
    return {"samples": samples}
