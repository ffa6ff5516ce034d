"""LoRA with peft: only the adapters (and the new classification head) train, accumulation stays
exact, and the outputs load elsewhere: the adapter onto a freshly built base with peft, the merged
model with transformers alone, both predicting what the trained model predicts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from tests.trainer_core.helpers import CLASSIFICATION, initial_weights, make_spec, max_abs_diff, run
from trainer_core.loop.build import load_inputs
from trainer_core.model.load import load_model
from trainer_core.spec.callbacks import StopRequest

BACKENDS = ("pytorch", "accelerate", "trainer")
LORA = {"r": 4, "alpha": 8, "target_modules": ["query", "value"]}
TEXTS = ["a good and happy film", "a bad and sad film", "the cat sat"]


def _adapter(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "adapter" / "adapter_model.safetensors"))


def _logits(model: torch.nn.Module, tokenizer: object) -> torch.Tensor:
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)  # type: ignore[operator]
    with torch.no_grad():
        return model.eval()(**batch).logits  # type: ignore[no-any-return]


@pytest.mark.parametrize("backend", BACKENDS)
def test_lora_accumulation_is_exact_and_only_adapters_train(backend: str, tmp_path: Path) -> None:
    runs = {}
    for b, k in ((4, 4), (16, 1)):
        spec = make_spec(
            CLASSIFICATION,
            backend=backend,
            per_device_train_batch_size=b,
            gradient_accumulation_steps=k,
            num_train_epochs=1,
            lora=LORA,
        )
        out = tmp_path / f"{b}x{k}"
        result = run(spec, out)
        assert result.status == "completed"
        assert result.summary["num_trainable_parameters"] < result.summary["num_parameters"] / 5
        runs[(b, k)] = _adapter(out)
    small, large = runs[(4, 4)], runs[(16, 1)]
    assert any("lora_A" in name for name in large)
    initial = initial_weights(spec)
    start = {name: initial[_in_model(name)] for name in large}
    update = max_abs_diff(large, start)
    lora_b = max(float(t.abs().max()) for name, t in large.items() if "lora_B" in name)
    assert lora_b > 0  # lora_B starts at zero: the adapters trained
    assert max_abs_diff(small, large) <= 1e-3 * update


def _in_model(saved: str) -> str:
    """A saved adapter tensor's name in the live peft model (adapter "default")."""
    for part in (".lora_A", ".lora_B"):
        if part in saved:
            return saved.replace(part + ".", part + ".default.")
    return saved.replace(".classifier.", ".classifier.modules_to_save.default.")


def test_adapter_and_merged_model_load_and_predict_alike(tmp_path: Path) -> None:
    spec = make_spec(CLASSIFICATION, num_train_epochs=1, lora=LORA, merge_lora=True)
    assert run(spec, tmp_path).status == "completed"
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    merged = AutoModelForSequenceClassification.from_pretrained(tmp_path / "model")
    assert not isinstance(merged, PeftModel)
    inputs = load_inputs(spec)
    base_spec = spec.model_copy(update={"lora": None, "merge_lora": False})
    base = load_model(base_spec, inputs.tokenizer, inputs.data.label_names)
    adapted = PeftModel.from_pretrained(base, tmp_path / "adapter")
    expected = _logits(adapted, tokenizer)
    assert torch.allclose(_logits(merged, tokenizer), expected, atol=1e-5)
    untrained = load_model(base_spec, inputs.tokenizer, inputs.data.label_names)
    assert not torch.allclose(_logits(untrained, tokenizer), expected, atol=1e-3)


class _PreemptAt:
    """A stop check that asks for a preemption at its n-th call (mid-epoch: the run checkpoints
    at the window's end and stops)."""

    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def __call__(self) -> StopRequest | None:
        self.calls += 1
        return "preempt" if self.calls == self.n else None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_preempted_lora_job_resumes_to_the_uninterrupted_adapters(
    backend: str, tmp_path: Path
) -> None:
    """A LoRA checkpoint is resumable: it used to be read back as a peft adapter file that the
    checkpoint writer never wrote, so every LoRA resume (preemption, crash, OOM re-plan) failed."""
    spec = make_spec(CLASSIFICATION, backend=backend, lora=LORA, per_device_train_batch_size=4,
                     gradient_accumulation_steps=2)  # fmt: skip
    assert run(spec, tmp_path / "clean").status == "completed"
    assert run(spec, tmp_path / "resumed", should_stop=_PreemptAt(20)).status == "preempted"
    resumed = run(spec, tmp_path / "resumed")
    assert resumed.status == "completed" and resumed.summary["start_step"] > 0
    clean, again = _adapter(tmp_path / "clean"), _adapter(tmp_path / "resumed")
    initial = initial_weights(spec)
    update = max_abs_diff(clean, {name: initial[_in_model(name)] for name in clean})
    assert max_abs_diff(again, clean) <= 1e-3 * update
