"""The job spec rejects nonsense with the field named, and stays cheap to import."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from trainer_core.spec.chat import CHATML_TEMPLATE
from trainer_core.spec.job import JobSpec, example_spec

BASE = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}
CAUSAL = {"model": "builtin:tiny-gpt2", "dataset": "builtin:tiny-stories", "task": "causal-lm"}

BAD = [
    ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps"),
    ({"gradient_accumulation_steps": -2}, "gradient_accumulation_steps"),
    ({"learning_rate": -1e-3}, "learning_rate"),
    ({"learning_rate": 0}, "learning_rate"),
    ({"backend": "jax"}, "backend"),
    ({"task": "translation"}, "task"),
    ({"per_device_train_batch_size": 0}, "per_device_train_batch_size"),
    ({"num_train_epochs": 0}, "num_train_epochs"),
    ({"max_grad_norm": -1}, "max_grad_norm"),
    ({"max_seq_length": 1}, "max_seq_length"),
    ({"lr_scheduler_type": "exponential"}, "lr_scheduler_type"),
    ({"seed": -1}, "seed"),
    ({"validation_split_percentage": -1}, "validation_split_percentage"),
    ({"max_train_samples": 0}, "max_train_samples"),
    ({"model": "builtin:huge"}, "model"),
    ({"model": ""}, "model"),
    ({"model": "not a/valid id!"}, "model"),
    ({"dataset": "builtin:nope"}, "dataset"),
    ({"dataset": "builtin:tiny-stories"}, "dataset"),  # no labels for classification
    ({"eval_dataset": "builtin:tiny-stories"}, "eval_dataset"),
    ({"gradient_accumulation_steps": "four"}, "gradient_accumulation_steps"),
    ({"unknown_field": 1}, "unknown_field"),
]


@pytest.mark.parametrize(("change", "field"), BAD)
def test_rejects_with_field_named(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        JobSpec(**{**BASE, **change})
    assert field in {str(loc) for e in info.value.errors() for loc in e["loc"]}


def test_label_column_on_causal_lm_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        JobSpec(**CAUSAL, label_column="label")
    assert [e["loc"] for e in info.value.errors()] == [("label_column",)]


def test_defaults_and_derived_values() -> None:
    spec = JobSpec(**BASE, per_device_train_batch_size=6, gradient_accumulation_steps=5)
    assert spec.effective_batch_size == 30
    assert spec.resolved_label_column == "label"
    assert JobSpec(**CAUSAL).resolved_label_column is None
    assert JobSpec.model_validate(example_spec()).backend == "pytorch"


@pytest.mark.parametrize(
    "source", ["bert-base-uncased", "owner/model-1.0", "./local_dir", "/data/model"]
)
def test_accepts_hub_ids_and_paths(source: str) -> None:
    assert JobSpec(**{**BASE, "model": source}).model == source


def test_importing_the_spec_does_not_import_torch() -> None:
    code = "import sys, trainer_core, trainer_core.spec.job; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_real_sized_chat_template_is_taken_and_the_template_bound_is_stated() -> None:
    """Every other string of the spec is capped at 1024 characters; a chat template is not
    (Qwen's and Llama's run to several thousand), only at the renderer's own bound."""
    chat = {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic", "task": "causal-lm"}
    padding = "{#" + "x" * 5000 + "#}"  # a Jinja comment: renders as the ChatML template does
    spec = JobSpec(**chat, chat_template=padding + CHATML_TEMPLATE)
    assert spec.chat_template is not None and len(spec.chat_template) > 5000
    with pytest.raises(ValidationError) as refused:
        JobSpec(**chat, chat_template="{#" + "x" * 70000 + "#}" + CHATML_TEMPLATE)
    assert refused.value.errors()[0]["loc"] == ("chat_template",)
    assert "65536" in str(refused.value)
