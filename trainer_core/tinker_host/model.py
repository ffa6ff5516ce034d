"""The model a Tinker client trains: a built-in model (its weights made from seed 42, as the
predict server makes the base it serves and a default job trains from) or a hub or local causal
LM, with LoRA adapters of ``rank`` on every linear layer, or whole (rank 0). ``export`` writes it
as a model folder the predict server and ``transformers`` load (``trainer_core.model.trained``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from trainer_core.builtin.models import builtin_tokenizer
from trainer_core.model.trained import BUILTIN_BASE, build_builtin

BUILTIN_SEED = 42  # gradacc.serving.resolve.BUILTIN_SEED: the served base's, a default job's


@dataclass(frozen=True)
class ModelChoice:
    """``source``: ``builtin:<name>``, a hub id or a folder; ``rank`` 0 trains every weight."""

    source: str
    rank: int = 0
    seed: int = 0


def load(choice: ModelChoice) -> tuple[Any, PreTrainedTokenizerBase]:
    """The model in train mode (dropout off in every built-in) and its tokenizer."""
    if choice.source.startswith("builtin:"):
        tokenizer = builtin_tokenizer(choice.source)
        model = build_builtin(choice.source, BUILTIN_SEED, AutoModelForCausalLM, {}, tokenizer)
    else:
        tokenizer = AutoTokenizer.from_pretrained(choice.source)
        model = AutoModelForCausalLM.from_pretrained(choice.source)
    if choice.rank > 0:
        from peft import LoraConfig, get_peft_model  # imported only for LoRA models

        torch.manual_seed(choice.seed)
        config = LoraConfig(
            r=choice.rank, lora_alpha=choice.rank, target_modules="all-linear", lora_dropout=0.0
        )
        model = get_peft_model(model, config)
    model.train()
    return model, tokenizer


def trainable(model: Any) -> dict[str, torch.nn.Parameter]:
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def export(model: Any, tokenizer: Any, choice: ModelChoice, folder: Path) -> int:
    """A LoRA model's adapters (with ``gradacc_base.json`` naming a built-in base and its seed),
    or a whole model's weights, with the tokenizer: the bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    if choice.rank > 0 and choice.source.startswith("builtin:"):
        named = {"model": choice.source, "seed": BUILTIN_SEED}
        (folder / BUILTIN_BASE).write_text(json.dumps(named), encoding="utf-8")
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
