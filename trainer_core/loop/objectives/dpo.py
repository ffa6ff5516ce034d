"""DPO: the pair (prompt, chosen, rejected) is the item. A micro-step back-propagates
Σ_pairs loss_j / N_W (+ the RPO term's Σ chosen NLL / T_W), with N_W the window's pairs and T_W
its chosen trained tokens over every micro-batch and rank (the loss and its normaliser:
``accumulation``, "Pairs"; the counts: ``data.dpo.PreferencePlan``). Evaluation: the loss and
DPO's metrics, means over every validation pair.

The reference is the starting weights. With LoRA it is the model itself with its adapters off
(peft's ``disable_adapter``): no second copy in memory. Otherwise, when it must run during
training, a frozen copy taken before any checkpoint is restored. Its log-probs are either cached
(the default): computed once per pair before training, in fp32, in eval mode, a fixed number of
pairs per forward in the split's order, and kept with the tokenized rows
(``PreferenceSplit.reference``), so a re-plan, a resume or another K reuses them and they do not
depend on b, K or the ranks; or online: computed at every micro-step on the same micro-batch, in
fp32 (autocast off), without gradients. Both give the same gradient up to fp32 round-off
(tests/trainer_core/test_dpo_exactness.py). The eval split's are cached either way.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from trainer_core.accumulation import (
    IGNORE_INDEX,
    MicroStep,
    PairLoss,
    pair_losses,
    pair_micro_step,
    token_nll,
)
from trainer_core.chunked_head import check_head
from trainer_core.data.dpo import PreferencePlan, collate_pairs
from trainer_core.data.loader import Planned
from trainer_core.data.splits import PreferenceSplit, TokenizedSplit
from trainer_core.distributed import World, collective_rows, shard, sum_over_ranks
from trainer_core.spec.dpo import PAIR_METRICS
from trainer_core.spec.job import JobSpec

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
    spec: JobSpec,
    model: torch.nn.Module,
    split: PreferenceSplit,
    pad_id: int,
    device: torch.device,
) -> np.ndarray:
    """The cached reference of ``split`` (computed on its first use, from ``model``, which must
    hold the starting weights then)."""
    if len(split) and spec.model not in split.reference:
        split.reference[spec.model] = cached_reference(model, split, pad_id, device)
    cached: np.ndarray = split.reference.get(spec.model, np.zeros((0, 2), dtype=np.float32))
    return cached


class DpoObjective:
    """Built before a checkpoint is restored into ``model``: the online reference (without
    LoRA) is a frozen copy of it, and the eval split's reference is cached from it now."""

    def __init__(
        self,
        spec: JobSpec,
        model: torch.nn.Module,
        train: PreferenceSplit,
        evaluation: TokenizedSplit,
        device: torch.device,
        *,
        pad_id: int,
    ) -> None:
        self.spec, self.train, self.device, self.pad_id = spec, train, device, pad_id
        self.loss, self.chunk = pair_loss(spec), spec.loss_chunk_tokens
        if self.chunk:
            check_head(model, device, spec.model)
        # An empty eval split is a plain one; one with rows holds pairs, as the train split.
        self.eval = evaluation if len(evaluation) else None
        if self.eval is not None:
            reference_for(spec, model, self.eval, pad_id, device)  # type: ignore[arg-type]
        self.cached = spec.reference_logprobs == "cached"
        self.reference = reference_for(spec, model, train, pad_id, device) if self.cached else None
        self.online: Callable[[dict[str, Any]], torch.Tensor] | None = None
        if not self.cached:
            frozen = None if spec.lora is not None else copy.deepcopy(model).requires_grad_(False)

            def online(batch: dict[str, Any]) -> torch.Tensor:
                with as_reference(model, frozen) as reference:
                    return sequence_logps(reference, batch)

            self.online = online

    def plan(self, planned: Planned) -> PreferencePlan:
        return PreferencePlan(self.train, reference=self.reference, **planned.kwargs())

    def micro_step(self, model: torch.nn.Module, batch: dict[str, Any]) -> MicroStep:
        return pair_micro_step(model, batch, self.loss, self.online, self.chunk)

    def evaluate(
        self, model: torch.nn.Module, world: World, predicted: list[int]
    ) -> dict[str, float]:
        """``eval_loss`` and ``eval_rewards/...``, ``eval_logps/...``, means over the pairs
        (the RPO term a mean over the chosen trained tokens), against the eval split's cached
        reference; every rank its share, a rank with none adding zeros."""
        split: Any = self.eval
        if split is None:
            return {}
        was_training = model.training
        model.train(False)  # eval mode (``eval()`` is untyped)
        try:
            sums = self._sums(model, split, shard(list(range(len(split))), world), world)
        finally:
            model.train(was_training)
        names = ["loss", "nll", "tokens", *PAIR_METRICS]
        # host sync: once per evaluation
        totals = dict(
            zip(names, sum_over_ranks([float(sums.get(n, 0)) for n in names], world), strict=True)
        )
        pairs = len(split)
        eval_loss = totals["loss"] / pairs
        if self.spec.rpo_alpha:
            eval_loss += self.spec.rpo_alpha * totals["nll"] / max(totals["tokens"], 1)
        return {"eval_loss": eval_loss} | {f"eval_{n}": totals[n] / pairs for n in names[3:]}

    @torch.inference_mode()
    def _sums(
        self, model: torch.nn.Module, split: PreferenceSplit, rows: list[int], world: World
    ) -> dict[str, torch.Tensor]:
        """Σ over ``rows`` of each pair's loss and metrics, the chosen NLL and its tokens."""
        reference = split.reference[self.spec.model]
        sums: dict[str, torch.Tensor] = {}
        size = self.spec.per_device_eval_batch_size
        for start in range(0, collective_rows(len(split), world, size), size):
            chunk = rows[start : start + size]
            if not chunk:  # a rank out of pairs runs a stand-in forward (a sharded collective)
                stand_in = collate_pairs(split, [0], self.pad_id, reference)
                model(input_ids=stand_in["input_ids"].to(self.device))
                continue
            batch = collate_pairs(split, chunk, self.pad_id, reference)
            tensors = {
                k: v.to(self.device) for k, v in batch.items() if isinstance(v, torch.Tensor)
            }
            logits = model(
                input_ids=tensors["input_ids"], attention_mask=tensors["attention_mask"]
            ).logits
            nll = token_nll(logits, tensors["labels"])
            trained = (tensors["labels"][:, 1:] != IGNORE_INDEX).sum(-1)
            losses, metrics = pair_losses(-nll.sum(-1), tensors["ref_logps"], trained, self.loss)
            parts = {
                "loss": losses,
                "nll": nll[: len(chunk)].sum(-1),
                "tokens": trained[: len(chunk)],
            }
            for name, value in (parts | metrics).items():
                sums[name] = sums.get(name, 0) + value.double().sum()
        return sums

    def epoch_record(self, train_tokens: float) -> dict[str, Any]:
        """Items are pairs: their trained tokens are counted apart."""
        return {"train_tokens": int(train_tokens)}
