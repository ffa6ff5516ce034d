"""``per_device_train_batch_size: "auto"``: the largest micro-batch that fits a memory budget.

The candidates are the divisors of the effective batch (so K = effective / micro-batch is whole
and the run's windows are the user's). Each is probed with one forward and backward pass at the
longest sequence of the training data, as training would run it (precision, checkpointing,
adapters), and measured:
- on a GPU, ``torch.cuda.max_memory_allocated`` during the probe, against ``max_memory_fraction``
  of the card (default 0.9) or ``max_memory_bytes``;
- on a CPU, which keeps no allocator statistics, the bytes of every tensor autograd keeps for the
  backward pass plus parameters, gradients and two optimizer moments: the part of the footprint
  that grows with the batch, and the part that does not.
A probe that raises ``torch.OutOfMemoryError`` does not fit. Candidates are tried from small to
large and the search stops at the first that does not fit (memory grows with the batch). With a
memory plan (a causal LM of a family the plan counts: ``trainer_core.model.memory_plan``), the
search starts from the largest candidate the plan says fits and goes down to the first that does:
one probe when the plan is right, instead of one per candidate up to the limit (each a forward and
backward of the whole model: seconds on a large one).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer_core.accumulation import micro_step_loss
from trainer_core.data.splits import TokenizedSplit
from trainer_core.model.precision import autocast
from trainer_core.spec.batching import divisors
from trainer_core.spec.errors import OutOfMemory
from trainer_core.spec.job import JobSpec

DEFAULT_FRACTION = 0.9


@dataclass
class Choice:
    micro_batch_size: int
    budget_bytes: int
    tried: list[dict[str, Any]] = field(
        default_factory=list
    )  # {"micro_batch_size", "bytes", "fits"}


def memory_budget(spec: JobSpec, device: torch.device) -> int:
    if spec.max_memory_bytes is not None:
        return spec.max_memory_bytes
    fraction = spec.max_memory_fraction or DEFAULT_FRACTION
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(fraction * total)


def _probe_batch(split: TokenizedSplit, rows: int, pad_id: int, causal: bool) -> dict[str, Any]:
    longest = max(range(len(split)), key=lambda i: len(split.input_ids[i]))
    ids = torch.tensor([split.input_ids[longest]] * rows, dtype=torch.long)
    mask = torch.ones_like(ids)
    labels = ids.clone() if causal else torch.zeros(rows, dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "n_window_items": 1}


def _static_bytes(model: torch.nn.Module) -> int:
    """Parameters, plus gradients and two optimizer moments for the trainable ones."""
    total = 0
    for p in model.parameters():
        size = p.numel() * p.element_size()
        total += size * (4 if p.requires_grad else 1)
    return total


def _measure(model: torch.nn.Module, batch: dict[str, Any], spec: JobSpec) -> int:
    device = next(model.parameters()).device
    saved: dict[int, int] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            with autocast(spec.mixed_precision, device):
                step = micro_step_loss(model, batch, spec.task == "causal-lm")
            step.loss.backward()  # type: ignore[no-untyped-call]
        if device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(device))
        return _static_bytes(model) + sum(saved.values())
    finally:
        model.zero_grad(set_to_none=True)


def choose_micro_batch(
    model: torch.nn.Module,
    train: TokenizedSplit,
    spec: JobSpec,
    device: torch.device,
    pad_id: int,
    *,
    world: int = 1,
    planned: Callable[[int], int] | None = None,
) -> Choice:
    """The largest divisor of effective / world that fits (each of ``world`` ranks holds one);
    ``planned``: the memory plan's bytes at a micro-batch, to start the search from."""
    assert spec.effective_batch_size is not None
    budget = memory_budget(spec, device)
    choice = Choice(micro_batch_size=0, budget_bytes=budget)
    rng = torch.random.get_rng_state()  # the probe must leave no trace in the run's randomness
    model.train()
    candidates = divisors(spec.effective_batch_size // world)
    if planned is not None:  # from the plan's largest down: the first that fits is the answer
        start = max((r for r in candidates if planned(r) <= budget), default=candidates[0])
        candidates = sorted((r for r in candidates if r <= start), reverse=True)
    for rows in candidates:
        batch = _probe_batch(train, rows, pad_id, spec.task == "causal-lm")
        try:
            used: int | None = _measure(model, batch, spec)
        except torch.OutOfMemoryError:
            used = None
        fits = used is not None and used <= budget
        entry = {"micro_batch_size": rows, "bytes": used, "fits": fits}
        choice.tried.append(entry | ({"planned": planned(rows)} if planned else {}))
        if fits:
            choice.micro_batch_size = rows
            if planned is not None:
                break  # going down: the first that fits
        elif planned is None:
            break  # going up: the first that does not fit ends the search
    torch.random.set_rng_state(rng)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if choice.micro_batch_size == 0:
        raise OutOfMemory(
            f"per_device_train_batch_size: not even 1 row fits the memory budget of {budget:,} "
            f"bytes (tried {choice.tried}); lower max_seq_length or raise the budget",
            param="per_device_train_batch_size",
        )
    return choice
