"""A job's memory plan per device, before it trains: the states counted from its model's
parameters (``trainer_core.spec.memory``), and the activations of one micro-batch measured on
the model itself, run on fake tensors (``FakeTensorMode``: shapes and dtypes, no data, no
memory; an 8B's forward takes seconds): every tensor autograd saves for the backward, counted
once per storage, with and without gradient checkpointing.

The peak of a step is the states, then the larger of the gradients and what the backward starts
from (the activations, the logits and their gradient): gradients grow layer by layer as the
activations are freed, so the two meet at an end. A LoRA run is measured with its base frozen
and its targeted layers trainable (an adapter's own activations are of rank r: negligible).
Compared with the peak measured on this machine's CPU in bench/memory_plan.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig

from trainer_core.spec.job import JobSpec
from trainer_core.spec.memory import LORA_DEFAULTS, MemoryPlan, inventory, state_bytes

log = logging.getLogger(__name__)


def plan_memory(
    spec: JobSpec,
    config: PretrainedConfig,
    *,
    micro_batch: int,
    seq_len: int,
    device_bytes: int | None = None,
    shards: int = 1,
    accumulation: int | None = None,
) -> MemoryPlan:
    """The plan of ``spec``'s model (``config``) at ``micro_batch`` rows of ``seq_len`` tokens
    (a DPO row is two sequences), sharded over ``shards`` devices, K = ``accumulation`` (the
    spec's by default)."""
    fields = config.to_dict()
    lora = None if spec.lora is None else (spec.lora.r, tuple(spec.lora.target_modules or ()))
    four_bit = bool(getattr(spec, "load_in_4bit", False))
    k = accumulation or spec.gradient_accumulation_steps or 1
    states = state_bytes(
        fields, optimizer=spec.optim, lora=lora, four_bit=four_bit, shards=shards, accumulation=k
    )
    rows = micro_batch * (2 if spec.method == "dpo" else 1)
    acts = {
        mode: _saved_bytes(config, spec, rows, seq_len, checkpointing=mode)
        for mode in (False, True)
    }
    return MemoryPlan(
        weights=states.weights,
        gradients=states.gradients,
        optimizer=states.optimizer,
        activations=acts[False],
        activations_checkpointed=acts[True],
        logits=_logits_bytes(fields, spec, rows, seq_len),
        checkpointing=spec.gradient_checkpointing,
        backward_start=states.backward_start,
        device=device_bytes,
        micro_batch=micro_batch,
        seq_len=seq_len,
        shards=shards,
    )


def _logits_bytes(fields: dict[str, Any], spec: JobSpec, rows: int, seq_len: int) -> int:
    """Whole logits: the fp32 logits and their gradient. In chunks: a chunk's logits, softmax and
    gradient, and the head's weight gradient summed in fp32 beside the model's own."""
    vocab, hidden = int(fields["vocab_size"]), int(fields.get("hidden_size") or fields["n_embd"])
    chunk = spec.loss_chunk_tokens
    if chunk is None:
        return 2 * 4 * rows * seq_len * vocab
    return 3 * 4 * min(chunk, rows * seq_len) * vocab + 4 * vocab * hidden


def _saved_bytes(
    config: PretrainedConfig, spec: JobSpec, rows: int, seq_len: int, *, checkpointing: bool
) -> int:
    """What one forward of ``rows`` x ``seq_len`` saves for the backward, on fake tensors; with
    checkpointing, the blocks' inputs and one block recomputed in the backward."""
    from torch._subclasses.fake_tensor import FakeTensorMode  # imports torch._dynamo: ~1 s, once
    from transformers.initialization import no_init_weights

    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        seen[id(storage)] = storage.nbytes()
        return tensor

    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=spec.mixed_precision == "bf16")
    with FakeTensorMode(allow_non_fake_inputs=True):
        with no_init_weights():  # shapes only: initialising fake weights costs 4x the forward
            model: Any = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
        _trainable_as_the_job(model, spec, str(config.model_type))
        if checkpointing:  # transformers 5's name, and the one before it
            enable = getattr(model, "activation_checkpointing_enable", None)
            (enable or model.gradient_checkpointing_enable)()
        model.train()
        ids = torch.zeros((rows, seq_len), dtype=torch.long)
        with autocast, torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            model.get_decoder()(input_ids=ids, attention_mask=torch.ones_like(ids))
    saved = sum(seen.values())
    if not checkpointing:
        return saved
    full = _saved_bytes(config, spec, rows, seq_len, checkpointing=False)
    return saved + full // max(1, int(config.num_hidden_layers))  # one block recomputed


def _trainable_as_the_job(model: Any, spec: JobSpec, model_type: str) -> None:
    """With LoRA, the base frozen and the targeted layers' weights trainable: their inputs are
    saved as an adapter's are, and a frozen layer saves nothing for its weight."""
    if spec.lora is None and not getattr(spec, "load_in_4bit", False):
        return
    names = set(spec.lora.target_modules or ()) if spec.lora else set()
    names = names or set(LORA_DEFAULTS.get(model_type, ()))
    for name, parameter in model.named_parameters():
        parts = name.split(".")
        parameter.requires_grad_(len(parts) > 1 and parts[-2] in names)


def job_plan(
    spec: JobSpec,
    model: Any,
    *,
    micro_batch: int,
    device: torch.device,
    shards: int = 1,
    accumulation: int | None = None,
) -> MemoryPlan | None:
    """The plan of a running job's model (its config; a LoRA model's base's), at its
    ``max_seq_length``, against the device's memory (a GPU's; none on the CPU). None where no
    plan is made: a classifier, a family whose parameters are not counted here."""
    config = getattr(model, "config", None)
    if spec.task != "causal-lm" or config is None or inventory(config.to_dict()) is None:
        return None
    total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    try:
        return plan_memory(
            spec,
            config,
            micro_batch=micro_batch,
            seq_len=spec.max_seq_length,
            device_bytes=total,
            shards=shards,
            accumulation=accumulation,
        )
    except Exception as exc:  # a plan is advice: never the reason a job fails
        log.warning("no memory plan for %s: %s: %s", spec.model, type(exc).__name__, exc)
        return None


def planned_bytes(spec: JobSpec, model: Any, device: torch.device) -> Callable[[int], int] | None:
    """The plan's total at a micro-batch of r rows, from two plans (1 and 2 rows: activations
    and logits grow by the row), for ``"auto"`` to start from; None where no plan is made."""
    one = job_plan(spec, model, micro_batch=1, device=device)
    two = job_plan(spec, model, micro_batch=2, device=device)
    if one is None or two is None:
        return None
    low, high = one, two

    def total(rows: int) -> int:
        grown = {
            name: getattr(low, name) + (rows - 1) * (getattr(high, name) - getattr(low, name))
            for name in ("activations", "activations_checkpointed", "logits")
        }
        return replace(low, **grown, micro_batch=rows).total

    return total
