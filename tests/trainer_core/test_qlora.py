"""QLoRA (``load_in_4bit``): the base's linear layers held in nf4 by bitsandbytes (on this
machine's CPU), LoRA's adapters trained on top. Accumulation keeps its promise through the 4-bit
base: K micro-batches of b rows give the adapters of one batch of K*b, within what bf16 compute
allows; the base takes about a quarter of its bf16 bytes; a preempted run resumes to the same
adapters though its checkpoint leaves the quantized weights out; and the spec refuses what
cannot work, by name."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Qwen3Config

from tests.trainer_core.helpers import CHAT, run
from trainer_core.checkpoint.format import WEIGHTS
from trainer_core.model.quantized import four_bit_config, frozen_4bit_keys, requantized
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec

pytest.importorskip("bitsandbytes")

QLORA = {
    **CHAT,
    "lora": {"r": 8},
    "load_in_4bit": True,
    "max_train_samples": 48,
    "num_train_epochs": 1,
    "validation_split_percentage": 0,
    "learning_rate": 5e-3,
    "group_by_length": False,
    "seed": 3,
}
BF16_BOUND = 1e-2  # bf16's 8 bits of mantissa, through a few steps: the gap over the change


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bitsandbytes' and peft's notices about the CPU
        yield


def spec(b: int, k: int, **overrides: Any) -> JobSpec:
    return JobSpec(
        **QLORA, per_device_train_batch_size=b, gradient_accumulation_steps=k, **overrides
    )


def adapters(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "adapter" / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def accumulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("qlora-2x4")
    run(spec(2, 4), out)
    return out


def test_accumulated_adapters_are_the_large_batchs(accumulated: Path, tmp_path: Path) -> None:
    run(spec(8, 1), tmp_path)
    small, large = adapters(accumulated), adapters(tmp_path)
    assert small.keys() == large.keys() and any("lora_B" in key for key in small)
    # lora_B starts at zero: its final weights are the change the run made
    change = max(float(large[k].abs().max()) for k in large if "lora_B" in k)
    gap = max(float((small[k] - large[k]).abs().max()) for k in small)
    assert change > 1e-3
    assert gap <= BF16_BOUND * change, (gap, change)


def test_adapters_name_their_base_not_a_temporary_folder(accumulated: Path) -> None:
    config = json.loads((accumulated / "adapter" / "adapter_config.json").read_text())
    assert "gradacc-4bit" not in str(config.get("base_model_name_or_path"))


def test_a_preempted_run_resumes_to_the_same_adapters(accumulated: Path, tmp_path: Path) -> None:
    polls = 0

    def stop() -> str | None:
        nonlocal polls
        polls += 1
        return "preempt" if polls >= 10 else None

    assert run(spec(2, 4), tmp_path, should_stop=stop).status == "preempted"
    saved = load_file(str(tmp_path / "checkpoint" / WEIGHTS))
    assert not any(key.endswith(".weight.absmax") for key in saved)  # no quantized base in it
    assert run(spec(2, 4), tmp_path, resume=True).status == "completed"
    resumed, clean = adapters(tmp_path), adapters(accumulated)
    assert max(float((resumed[k] - clean[k]).abs().max()) for k in clean) == 0.0


def test_the_4bit_base_takes_a_quarter_of_its_bf16_bytes() -> None:
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=384,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        tie_word_embeddings=True,
    )
    model = AutoModelForCausalLM.from_config(config)
    bf16 = model.to(torch.bfloat16).get_memory_footprint()
    quantized = requantized(model, AutoModelForCausalLM, torch.device("cpu"))
    frozen = frozen_4bit_keys(quantized)
    assert frozen and all(".layers." in key for key in frozen)  # the linear layers, not the rest
    assert quantized.get_memory_footprint() <= 0.35 * bf16


def test_the_spec_refuses_what_cannot_work() -> None:
    with pytest.raises(ValidationError, match="load_in_4bit needs lora"):
        JobSpec(**{**QLORA, "lora": None})
    with pytest.raises(ValidationError, match=r"load_in_4bit.*merge_lora"):
        JobSpec(**{**QLORA, "merge_lora": True})
    with pytest.raises(JobError, match=r"load_in_4bit.*not on mps") as refused:
        four_bit_config(torch.device("mps"))
    assert refused.value.param == "load_in_4bit"
