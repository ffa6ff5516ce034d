"""The model a Tinker client trains: a built-in model (made from seed 0, as the predict server
makes it) or a hub or local causal LM, with LoRA adapters of ``rank`` on every linear layer, or
whole (rank 0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from trainer_core.builtin.models import builtin_tokenizer
from trainer_core.model.trained import build_builtin

BUILTIN_SEED = 0  # the seed the predict server makes a built-in base from


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
