"""The memory plan's counts against the models themselves: the parameters ``spec.memory`` counts
from a config alone (torch-free, what the API plans with) equal the real architecture's, built on
the meta device (no memory), for every real shape offered and the built-ins; LoRA's adapters equal
peft's; the fake-tensor activations grow with the micro-batch and shrink with checkpointing; and a
job's start reports its plan. How close the plan comes to a measured peak is bench/memory_plan.py's
(within 15 % on six configs)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from tests.trainer_core.helpers import CHAT, run
from trainer_core import train as train_module
from trainer_core.builtin.models import builtin_config, builtin_tokenizer
from trainer_core.data.load import load_job_data
from trainer_core.loop.autobatch import choose_micro_batch
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.model.memory_plan import plan_memory, planned_bytes
from trainer_core.spec.callbacks import TrainingCallback
from trainer_core.spec.job import JobSpec
from trainer_core.spec.memory import MemoryPlan, inventory, lora_params, state_bytes
from trainer_core.spec.shapes import SHAPES


def meta_model(fields: dict[str, Any]) -> torch.nn.Module:
    config = AutoConfig.for_model(**fields)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def real_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights once


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_shapes_parameters_are_counted_from_its_config(name: str) -> None:
    found = inventory(SHAPES[name])
    assert found is not None
    assert found.total == real_params(meta_model(SHAPES[name]))


@pytest.mark.parametrize("name", ["builtin:tiny-chat", "builtin:tiny-gpt2"])
def test_a_builtins_parameters_are_counted_from_its_config(name: str) -> None:
    fields = builtin_config(name, builtin_tokenizer(name)).to_dict()
    found = inventory(fields)
    assert found is not None and found.total == real_params(meta_model(fields))


def test_loras_adapters_are_peft_s() -> None:
    fields = SHAPES["builtin:qwen3-0.6b-shape"]
    model = get_peft_model(
        meta_model(fields), LoraConfig(r=16, target_modules=["q_proj", "v_proj"])
    )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    found = inventory(fields)
    assert found is not None
    assert lora_params(found, 16, ("q_proj", "v_proj"), "qwen3") == trainable


def test_an_8b_in_full_holds_16_bytes_a_parameter_and_sharding_divides_them() -> None:
    fields = SHAPES["builtin:qwen3-8b-shape"]
    found = inventory(fields)
    assert found is not None
    whole = state_bytes(fields, optimizer="adamw_torch")
    assert whole.total == 16 * found.total
    eight = state_bytes(fields, optimizer="adamw_torch", shards=8)
    head = 151_936 * 4096  # untied: the head (or the embeddings) is the largest unit
    gathered = 4 * (head + 2 * found.block)  # it, and two blocks (computing, prefetched)
    reduced = 2 * 4 * head  # its whole gradients and the reduction's copy
    assert eight.total == pytest.approx(whole.total / 8 + gathered + reduced, abs=8)
    assert eight.total / 2**30 < 35  # of 80 GiB: an 8B in full fits 8 of them
    window = state_bytes(fields, optimizer="adamw_torch", shards=8, accumulation=4)
    assert window.gradients == 4 * found.total + reduced  # K > 1: a window's gradients whole


def test_activations_grow_with_the_micro_batch_and_checkpointing_cuts_them() -> None:
    spec = JobSpec(**CHAT)
    config = builtin_config(spec.model, builtin_tokenizer(spec.model))
    one, two, four = (plan_memory(spec, config, micro_batch=b, seq_len=64) for b in (1, 2, 4))
    per_row = two.activations - one.activations  # and a part that is not per row (positions)
    assert per_row > 0
    assert four.activations - two.activations == pytest.approx(2 * per_row, rel=0.02)
    assert one.activations_checkpointed < one.activations
    assert four.logits == 4 * one.logits == 4 * 2 * 4 * 64 * config.vocab_size


def test_a_job_reports_its_plan_at_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU the start's plan is made for models of 100M parameters and more (lowered here
    to tiny-chat's size); below, none is made (its first use imports torch._dynamo: ~1 s)."""
    seen: list[dict[str, Any]] = []

    class Start(TrainingCallback):
        def on_start(self, info: dict[str, Any]) -> None:
            seen.append(info)

    spec = JobSpec(**CHAT, max_train_samples=8, num_train_epochs=1, per_device_train_batch_size=2)
    run(spec, tmp_path / "tiny", callback=Start())
    assert seen.pop()["memory_plan"] is None
    monkeypatch.setattr(train_module, "PLANNED_ON_CPU_FROM", 0)
    run(spec, tmp_path / "planned", callback=Start())
    plan = seen[0]["memory_plan"]
    config = builtin_config(spec.model, builtin_tokenizer(spec.model)).to_dict()
    found = inventory(config)
    assert found is not None
    assert plan["weights"] == 4 * found.total and plan["micro_batch"] == 2
    assert plan["seq_len"] == spec.max_seq_length and plan["activations"] > 0
    assert plan["line"].startswith("memory plan per device: weights ")


def test_auto_starts_from_the_plan_and_finds_what_the_full_search_finds() -> None:
    """``"auto"`` with a plan probes from the plan's largest candidate down; without one, from
    1 up. Both end at the same micro-batch; the plan's search probes fewer."""
    spec = JobSpec(
        **CHAT,
        per_device_train_batch_size="auto",
        effective_batch_size=32,
        max_seq_length=64,
        max_train_samples=64,
    )
    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    model = load_model(spec, tokenizer, None)
    cpu = torch.device("cpu")
    planned = planned_bytes(spec, model, cpu)
    assert planned is not None and planned(8) > planned(4) > planned(1)
    budget = (planned(4) + planned(8)) // 2
    bounded = spec.model_copy(update={"max_memory_bytes": budget})
    pad = int(tokenizer.pad_token_id)
    up = choose_micro_batch(model, data.train, bounded, cpu, pad)
    down = choose_micro_batch(model, data.train, bounded, cpu, pad, planned=planned)
    assert down.tried[0]["micro_batch_size"] == 4  # the plan's largest within the budget
    assert down.micro_batch_size == up.micro_batch_size
    assert len(down.tried) < len(up.tried)


def test_a_plan_over_its_device_names_what_would_bring_it_under() -> None:
    gib = 2**30
    plan = MemoryPlan(
        weights=10 * gib,
        gradients=10 * gib,
        optimizer=20 * gib,
        activations=40 * gib,
        activations_checkpointed=8 * gib,
        logits=4 * gib,
        checkpointing=False,
        device=64 * gib,
        micro_batch=8,
        seq_len=4096,
    )
    assert plan.total == 74 * gib and plan.fits is False
    advice = plan.advice()
    assert advice is not None and "gradient_checkpointing: true (42.00 GiB)" in advice
    assert "per_device_train_batch_size 6 or less" in advice  # 34 GiB of room, 5.5 a row
    assert replace(plan, device=80 * gib).advice() is None
