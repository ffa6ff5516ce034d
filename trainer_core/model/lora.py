"""LoRA through the ``peft`` library: adapters on a frozen model, saved on their own and, on
request, merged into a plain ``transformers`` model. Imported only for jobs that ask for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from peft import LoraConfig, TaskType, get_peft_model
from transformers import PreTrainedModel

from trainer_core.model.trained import LABELS
from trainer_core.spec.errors import ModelError
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import ADAPTER_DIR, MODEL_DIR


def apply_lora(model: PreTrainedModel, spec: JobSpec) -> Any:
    """The model with adapters; only they (and a classification head, which is new) train."""
    assert spec.lora is not None
    task = TaskType.CAUSAL_LM if spec.task == "causal-lm" else TaskType.SEQ_CLS
    config = LoraConfig(
        r=spec.lora.r,
        lora_alpha=spec.lora.alpha,
        lora_dropout=spec.lora.dropout,
        target_modules=list(spec.lora.target_modules) if spec.lora.target_modules else None,
        task_type=task,
    )
    try:
        return get_peft_model(model, config)
    except ValueError as exc:  # e.g. target modules that the model does not have
        raise ModelError(f"lora: {exc}", param="lora.target_modules") from exc


def save_outputs(
    model: Any, tokenizer: Any, output_dir: Path, *, merge: bool, whole: Any = None
) -> dict[str, str]:
    """``adapter/`` always (with the tokenizer: ``trainer_core.model.trained`` loads it on its
    base); ``model/`` (adapters merged into a plain model) when asked. ``whole``: a sharded
    model's state, gathered (its adapters are taken from it)."""
    adapter, full = output_dir / ADAPTER_DIR, output_dir / MODEL_DIR
    saved = {"adapter_dir": str(adapter)}
    model.save_pretrained(adapter, safe_serialization=True, state_dict=whole)
    tokenizer.save_pretrained(adapter)
    id2label = getattr(model.config, "id2label", None)
    if model.peft_config["default"].task_type == TaskType.SEQ_CLS and id2label:
        # peft saves the trained head but not the config that names its labels
        names = [id2label[i] for i in range(len(id2label))]
        (adapter / LABELS).write_text(json.dumps(names), encoding="utf-8")
    if merge:
        merged = model.merge_and_unload()
        merged.save_pretrained(full, safe_serialization=True)
        tokenizer.save_pretrained(full)
        saved["model_dir"] = str(full)
    return saved
