"""One window's rollouts, sampled once from the policy as it stands, before any backward.

A training window samples chunk by chunk (``sample_chunks``): the window's groups, cut into
fixed chunks of ``GrpoSettings.groups_per_call()`` groups, each chunk's prompts repeated
``group_size`` times through one left-padded ``model.generate`` with the KV cache, under a
generator seeded by (job seed, window, chunk index) alone. A chunk's members depend on the
window and that setting only, so b, K and the ranks decide how the backward is cut and which rank
samples which chunks, never what is sampled. One chunk per call keeps the calls few (a call's
fixed cost dominates on small models); ``sample_window`` is one chunk's sampling.

A completion ends at its first EOS (kept: the model learns to stop) or, without one, at
``max_completion_length`` (truncated). The old log-probs are the same policy's, one forward under
``no_grad`` (num_iterations 1: old = current, detached).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from trainer_core.spec.grpo import GrpoSettings

SEED_STRIDE = 1_000_003  # a prime: (seed, window) pairs give distinct generator seeds


@dataclass(frozen=True)
class Sampled:
    """Per completion, group-major: the prompt, the tokens, whether cut, old log-probs, text."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    truncated: list[bool]
    old_logps: list[list[float]]
    texts: list[str]


def window_seed(seed: int, window: int) -> int:
    return seed * SEED_STRIDE + window


def group_seed(seed: int, window: int, group: int) -> int:
    """The generator seed of a window's group: distinct for each (seed, window, group)."""
    state = np.random.SeedSequence([seed, window, group]).generate_state(1, np.uint64)
    return int(state[0])


def joined(parts: Sequence[Sampled]) -> Sampled:
    """Groups sampled apart (by ranks, or one by one), as one window in the order given."""
    names = ("prompt_ids", "completion_ids", "truncated", "old_logps", "texts")
    return Sampled(*([row for part in parts for row in getattr(part, name)] for name in names))


def _left_padded(prompts: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def _cut(row: list[int], eos_id: int, limit: int) -> tuple[list[int], bool]:
    """The completion up to and with its first EOS; without one it was cut at the budget."""
    if eos_id in row:
        return row[: row.index(eos_id) + 1], False
    return row[:limit], True


@torch.no_grad()
def _generate(
    model: torch.nn.Module,
    prompts: list[list[int]],
    pad_id: int,
    eos_id: int,
    settings: GrpoSettings,
    seed: int,
) -> list[list[int]]:
    ids, mask = _left_padded(prompts, pad_id)
    device = next(model.parameters()).device
    # The global generator, forked so that sampling neither reads nor moves the run's stream.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        out = cast(Any, model).generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            do_sample=True,
            temperature=settings.temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=settings.max_completion_length,
            min_new_tokens=1,
            pad_token_id=pad_id,
            eos_token_id=eos_id,
            use_cache=True,
        )
    return [row.tolist() for row in out[:, ids.shape[1] :].cpu()]


@torch.no_grad()
def old_logps(
    model: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]]
) -> list[list[float]]:
    """log π(token) of each completion token under the policy, one right-padded forward."""
    rows = [p + c for p, c in zip(prompts, completions, strict=True)]
    width = max(len(r) for r in rows)
    device = next(model.parameters()).device
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows], device=device)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
    logps = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), -1)
    taken = logps[:, :-1].gather(-1, ids[:, 1:, None])[..., 0].cpu()
    return [
        taken[i, len(p) - 1 : len(p) - 1 + len(c)].tolist()
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True))
    ]


def sample_window(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[list[int]],
    settings: GrpoSettings,
    seed: int,
) -> Sampled:
    """``group_size`` completions of each prompt from ``model`` in eval mode (no dropout)."""
    pad_id, eos_id = int(tokenizer.pad_token_id), int(tokenizer.eos_token_id)
    repeated = [list(p) for p in prompts for _ in range(settings.group_size)]
    was_training = model.training
    model.train(False)
    try:
        raw = _generate(model, repeated, pad_id, eos_id, settings, seed)
        cuts = [_cut(row, eos_id, settings.max_completion_length) for row in raw]
        completions = [c for c, _ in cuts]
        old = old_logps(model, repeated, completions)
    finally:
        model.train(was_training)
    texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
    return Sampled(repeated, completions, [t for _, t in cuts], old, list(texts))


def sample_chunks(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    chunks: Sequence[Sequence[list[int]]],
    settings: GrpoSettings,
    seeds: Sequence[int],
) -> Sampled:
    """``group_size`` completions of each prompt, one ``generate`` per chunk of prompts under the
    chunk's seed (``group_seed(seed, window, chunk)``): a chunk's completions are the same
    whichever chunks are sampled beside it, by this rank or another."""
    return joined(
        [
            sample_window(model, tokenizer, [list(p) for p in chunk], settings, seed)
            for chunk, seed in zip(chunks, seeds, strict=True)
        ]
    )
