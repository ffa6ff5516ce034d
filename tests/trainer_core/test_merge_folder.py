"""``python -m trainer_core merge`` (``trainer_core.model.merge``) writes a LoRA job's adapters
merged into their base as a plain model: the weights of the same job's ``merge_lora`` model, a
config without peft's keys, the tokenizer and its chat template; a classifier keeps its labels and
head. The folder appears whole (no temporary folder left beside it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from tests.trainer_core.helpers import CHAT, CLASSIFICATION, make_spec, max_abs_diff, run
from trainer_core.__main__ import main
from trainer_core.model.trained import build_builtin

LORA = {"r": 4, "alpha": 8}


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _trained_view(task: dict[str, Any], out: Path) -> Path:
    """A LoRA job trained with merge_lora (its model/ the reference) and the view the service
    builds of its adapters on a built-in base."""
    spec = make_spec(task, num_train_epochs=1, max_train_samples=16, lora=LORA, merge_lora=True,
                     learning_rate=1e-2, seed=5)  # fmt: skip
    assert run(spec, out).status == "completed"
    view = out / ".lora-model"
    shutil.copytree(out / "adapter", view)
    (view / "gradacc_base.json").write_text(json.dumps({"model": spec.model, "seed": spec.seed}))
    return view


def test_a_chat_lora_job_merges_into_its_merge_lora_model(tmp_path: Path) -> None:
    view = _trained_view(CHAT, tmp_path / "out")
    into = tmp_path / "out" / ".merged-model"
    assert main(["merge", str(view), "--output-dir", str(into)]) == 0
    assert sorted(p.name for p in into.parent.iterdir() if ".tmp" in p.name) == []
    names = {p.name for p in into.iterdir()}
    assert {"config.json", "model.safetensors"} <= names
    assert not names & {"adapter_config.json", "adapter_model.safetensors"}
    config = json.loads((into / "config.json").read_text())
    assert not [key for key in config if "peft" in key or "adapter" in key]
    merged = _state(AutoModelForCausalLM.from_pretrained(into))
    reference = _state(AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "model"))
    assert merged.keys() == reference.keys()
    assert max_abs_diff(merged, reference) < 1e-6
    base = _state(build_builtin(CHAT["model"], 5, AutoModelForCausalLM, {}))
    assert max_abs_diff(base, reference) > 1e-4  # negative control: the adapters moved it
    tokenizer = AutoTokenizer.from_pretrained(into)
    assert tokenizer.chat_template == AutoTokenizer.from_pretrained(view).chat_template


def test_a_classifier_keeps_its_labels_and_head(tmp_path: Path) -> None:
    view = _trained_view(CLASSIFICATION, tmp_path / "out")
    into = tmp_path / "merged"
    assert main(["merge", str(view), "--output-dir", str(into), "--classifier"]) == 0
    auto = AutoModelForSequenceClassification
    merged, reference = auto.from_pretrained(into), auto.from_pretrained(tmp_path / "out" / "model")
    assert merged.config.id2label == reference.config.id2label
    assert max_abs_diff(_state(merged), _state(reference)) < 1e-6
