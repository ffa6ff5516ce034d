"""DPO's part of a run: the reference, the objective the backends call, and the plan of pairs.

The reference is the starting weights. With LoRA it is the model itself with its adapters off
(peft's ``disable_adapter``): no second copy in memory. Otherwise, when it must run during
training, a frozen copy taken before any checkpoint is restored.

Its log-probs are either cached (the default): computed once per pair before training, in fp32,
in eval mode, a fixed number of pairs per forward in the split's order, and kept with the
tokenized rows (``PreferenceSplit.reference``), so a re-plan, a resume or another K reuses them
and they do not depend on b, K or the ranks; or online: computed at every micro-step on the same
micro-batch, in fp32 (autocast off), without gradients. Both give the same gradient up to fp32
round-off (tests/trainer_core/test_dpo_exactness.py).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from trainer_core.accumulation import MicroStep, PairLoss, pair_micro_step, token_nll
from trainer_core.data.load import PreferenceSplit
from trainer_core.data.pairs import PreferencePlan, collate_pairs
from trainer_core.spec.job import JobSpec

Objective = Callable[[torch.nn.Module, dict[str, Any]], MicroStep]
REFERENCE_PAIRS = 16  # pairs per forward when caching: fixed, so the cache is the same for all b


def pair_loss(spec: JobSpec) -> PairLoss:
    return PairLoss(spec.dpo_beta, spec.dpo_loss, spec.rpo_alpha)


@contextlib.contextmanager
def as_reference(model: torch.nn.Module, frozen: torch.nn.Module | None) -> Iterator[Any]:
    """The reference to call: the frozen copy, or the model with its adapters off, in eval mode
    (no dropout), without gradients, in fp32."""
    module = frozen if frozen is not None else model
    was_training = module.training
    module.eval()
    adapters = getattr(model, "disable_adapter", None) if frozen is None else None
    device = next(module.parameters()).device.type
    try:
        with (
            torch.no_grad(),
            torch.autocast(device, enabled=False),
            adapters() if adapters is not None else contextlib.nullcontext(),
        ):
            yield module
    finally:
        module.train(was_training)


def sequence_logps(module: Any, batch: dict[str, Any]) -> torch.Tensor:
    """s(y) of each sequence of a batch of pairs: its trained tokens' summed log-prob."""
    logits = module(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return -token_nll(logits, batch["labels"]).sum(-1)


def cached_reference(
    model: torch.nn.Module, split: PreferenceSplit, pad_id: int, device: torch.device
) -> np.ndarray:
    """(pairs, 2) float32: the reference's s(chosen), s(rejected) of every pair of ``split``."""
    out = np.zeros((len(split), 2), dtype=np.float32)
    with as_reference(model, None) as reference:
        for start in range(0, len(split), REFERENCE_PAIRS):
            rows = list(range(start, min(len(split), start + REFERENCE_PAIRS)))
            batch = collate_pairs(split, rows, pad_id)
            tensors = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "labels")}
            logps = sequence_logps(reference, tensors).float().cpu().numpy()
            out[rows, 0], out[rows, 1] = logps[: len(rows)], logps[len(rows) :]
    return out


def reference_for(
    spec: JobSpec, model: torch.nn.Module, split: PreferenceSplit, pad_id: int,
    device: torch.device,
) -> np.ndarray:  # fmt: skip
    """The cached reference of ``split`` (computed on its first use, from ``model``, which must
    hold the starting weights then)."""
    if len(split) and spec.model not in split.reference:
        split.reference[spec.model] = cached_reference(model, split, pad_id, device)
    cached: np.ndarray = split.reference.get(spec.model, np.zeros((0, 2), dtype=np.float32))
    return cached


def objective(spec: JobSpec, model: torch.nn.Module) -> Objective:
    """What a backend calls for each micro-batch of pairs. Online without LoRA, this takes the
    frozen copy of ``model`` now: call it before a checkpoint is restored into ``model``."""
    loss = pair_loss(spec)
    if spec.reference_logprobs == "cached":
        return lambda policy, batch: pair_micro_step(policy, batch, loss, None)
    frozen = None if spec.lora is not None else copy.deepcopy(model).requires_grad_(False)

    def online(batch: dict[str, Any]) -> torch.Tensor:
        with as_reference(model, frozen) as reference:
            return sequence_logps(reference, batch)

    return lambda policy, batch: pair_micro_step(policy, batch, loss, online)


def preference_plan(
    spec: JobSpec, model: torch.nn.Module, split: PreferenceSplit, evaluation: Any,
    device: torch.device, **plan: Any,
) -> PreferencePlan:  # fmt: skip
    """The epoch plan of pairs, with the cached reference's log-probs when they are cached. The
    eval split's are cached either way (``loop.dpo_eval``)."""
    if isinstance(evaluation, PreferenceSplit):
        reference_for(spec, model, evaluation, plan["pad_id"], device)
    cached = spec.reference_logprobs == "cached"
    reference = reference_for(spec, model, split, plan["pad_id"], device) if cached else None
    return PreferencePlan(split, reference=reference, **plan)
