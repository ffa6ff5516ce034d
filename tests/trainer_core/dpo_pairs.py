"""Preference pairs for the DPO tests, and the gradient of one window computed the plain way."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch

from trainer_core.accumulation import PairLoss, pair_losses, token_nll
from trainer_core.data.dpo import collate_pairs
from trainer_core.data.load import load_job_data
from trainer_core.data.splits import PreferenceSplit
from trainer_core.loop.objectives.dpo import cached_reference
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.job import JobSpec

Grads = dict[str, torch.Tensor]
WORDS = [
    "what",
    "is",
    "the",
    "sum",
    "of",
    "seven",
    "and",
    "twelve",
    "plus",
    "nine",
    "minus",
    "three",
    "it",
    "makes",
    "a",
    "number",
]
# Completion lengths in words (a word is 1-3 tokens here): a completion trains 3 to 44 tokens (its
# words and the end of turn), so micro-batches hold very different amounts, the case where a mean
# per micro-batch goes wrong.
LENGTHS = [(1, 14), (13, 1), (2, 9), (12, 3), (1, 1), (8, 13), (4, 2), (14, 6), (3, 11), (1, 7),
           (10, 1)]  # fmt: skip


def pairs_file(folder: Path, count: int = 11, seed: int = 0) -> Path:
    """``count`` TRL-shaped pairs: a conversation prompt, two answers of very unequal length."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        chosen, rejected = LENGTHS[i % len(LENGTHS)]
        prompt = [{"role": "user", "content": " ".join(rng.choices(WORDS, k=1 + i % 5))}]
        if i % 3 == 0:
            prompt.insert(0, {"role": "system", "content": "Answer briefly."})
        rows.append({
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": " ".join(rng.choices(WORDS, k=chosen))}],
            "rejected": [{"role": "assistant",
                          "content": " ".join(rng.choices(WORDS, k=rejected))}],
        })  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def start(spec: JobSpec) -> tuple[torch.nn.Module, PreferenceSplit, int]:
    """The starting model and the training pairs, with their cached reference."""
    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    model = load_model(spec, tokenizer, None)
    assert isinstance(data.train, PreferenceSplit)
    pad = int(tokenizer.pad_token_id)
    data.train.reference[spec.model] = cached_reference(model, data.train, pad, torch.device("cpu"))
    return model, data.train, pad


def window_terms(
    model: torch.nn.Module, split: PreferenceSplit, pad: int, rows: list[int], loss: PairLoss,
    reference: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Per-pair losses, the chosen NLL sum and the chosen trained tokens of ``rows``, in one
    forward."""
    batch = collate_pairs(split, rows, pad, reference)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    nll = token_nll(logits, batch["labels"])
    trained = (batch["labels"][:, 1:] != -100).sum(-1)
    losses, _ = pair_losses(-nll.sum(-1), batch["ref_logps"], trained, loss)
    return losses, nll[: len(rows)].sum(), trained[: len(rows)].sum()


def gradient(model: torch.nn.Module) -> Grads:
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def reference_gradient(spec: JobSpec, loss: PairLoss) -> Grads:
    """∇ of the window's loss in one forward over all its pairs: Σ loss_j / N + alpha Σ nll / T."""
    model, split, pad = start(spec)
    rows = list(range(len(split)))
    losses, nll, tokens = window_terms(model, split, pad, rows, loss, split.reference[spec.model])
    total = losses.sum() / len(rows) + (loss.rpo_alpha or 0.0) * nll / tokens
    total.backward()  # type: ignore[no-untyped-call]
    return gradient(model)


def relative_gap(grads: Grads, reference: Grads) -> float:
    """max |g - g_ref| / max |g_ref| over the parameters both name."""
    names = grads.keys() & reference.keys()
    assert names, "no parameter in common"
    gap = max(float((grads[n] - reference[n]).abs().max()) for n in names)
    return gap / max(float(reference[n].abs().max()) for n in names)
