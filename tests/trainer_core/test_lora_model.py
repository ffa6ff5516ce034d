"""A LoRA job's adapters are a model: the core's loading rule (``trainer_core.model.trained``)
puts them on their base, named by the folder itself, and gives the weights of the same job's
merged model (``merge_lora``); a job trained from such a folder starts from those weights. A base
named by a path in the adapter config, or a ``base/`` that leads outside, stays refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from tests.trainer_core.helpers import CHAT, CLASSIFICATION, make_spec, max_abs_diff, run
from trainer_core.loop.build import load_inputs
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.model.trained import build_builtin, load_trained, stored_labels
from trainer_core.spec.errors import ModelError
from trainer_core.spec.job import JobSpec

LORA = {"r": 4, "alpha": 8}


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def chat_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobSpec, Path]:
    """One LoRA chat job with merge_lora: its adapter/ and, for reference, its merged model/."""
    out = tmp_path_factory.mktemp("lora-chat")
    spec = make_spec(CHAT, num_train_epochs=1, max_train_samples=32, lora=LORA, merge_lora=True,
                     learning_rate=5e-3, seed=7)  # fmt: skip
    assert run(spec, out).status == "completed"
    return spec, out


def _view(spec: JobSpec, out: Path, into: Path) -> Path:
    """What the service builds for a built-in base: the adapter folder and the base's name."""
    shutil.copytree(out / "adapter", into)
    base = {"model": spec.model, "seed": spec.seed}
    (into / "gradacc_base.json").write_text(json.dumps(base))
    return into


def test_adapters_on_a_builtin_base_are_the_merged_model(
    chat_job: tuple[JobSpec, Path], tmp_path: Path
) -> None:
    spec, out = chat_job
    merged = _state(AutoModelForCausalLM.from_pretrained(out / "model"))
    loaded = _state(load_trained(_view(spec, out, tmp_path / "v"), AutoModelForCausalLM,
                                 label_kwargs={}))  # fmt: skip
    assert loaded.keys() == merged.keys()
    assert max_abs_diff(loaded, merged) < 1e-6
    # Negative control: the base alone (the adapters not applied) is measurably elsewhere.
    base = _state(build_builtin(spec.model, spec.seed, AutoModelForCausalLM, {}))
    assert max_abs_diff(base, merged) > 1e-3


def test_a_wrong_seed_is_a_different_base(chat_job: tuple[JobSpec, Path], tmp_path: Path) -> None:
    spec, out = chat_job
    view = _view(spec, out, tmp_path / "v")
    (view / "gradacc_base.json").write_text(json.dumps({"model": spec.model, "seed": 8}))
    merged = _state(AutoModelForCausalLM.from_pretrained(out / "model"))
    loaded = _state(load_trained(view, AutoModelForCausalLM, label_kwargs={}))
    assert max_abs_diff(loaded, merged) > 1e-3


def test_a_base_folder_inside_the_view_is_the_base(
    chat_job: tuple[JobSpec, Path], tmp_path: Path
) -> None:
    spec, out = chat_job
    view = tmp_path / "v"
    shutil.copytree(out / "adapter", view)
    build_builtin(spec.model, spec.seed, AutoModelForCausalLM, {}).save_pretrained(view / "base")
    merged = _state(AutoModelForCausalLM.from_pretrained(out / "model"))
    loaded = _state(load_trained(view, AutoModelForCausalLM, label_kwargs={}))
    assert max_abs_diff(loaded, merged) < 1e-6


def test_a_job_from_the_adapters_starts_from_the_merged_weights(
    chat_job: tuple[JobSpec, Path], tmp_path: Path
) -> None:
    spec, out = chat_job
    view = _view(spec, out, tmp_path / "v")
    again = spec.model_copy(update={"model": str(view), "seed": 1})  # another seed: same start
    model = load_model(again, load_tokenizer(again), None)
    merged = _state(AutoModelForCausalLM.from_pretrained(out / "model"))
    start = {k.removeprefix("base_model.model.").replace(".base_layer", ""): v
             for k, v in _state(model).items() if "lora_" not in k}  # fmt: skip
    assert max_abs_diff(start, merged) < 1e-6
    lora_b = [v for k, v in _state(model).items() if "lora_B" in k]
    assert lora_b and all(float(t.abs().max()) == 0 for t in lora_b)  # a new adapter, at zero
    whole = again.model_copy(update={"lora": None, "merge_lora": False})
    full = load_model(whole, load_tokenizer(whole), None)  # a full fine-tune trains every weight
    assert all(p.requires_grad for p in full.parameters())
    assert max_abs_diff(_state(full), merged) < 1e-6


def test_a_classifier_keeps_its_labels_and_head(tmp_path: Path) -> None:
    spec = make_spec(CLASSIFICATION, num_train_epochs=1, max_train_samples=32, lora=LORA,
                     merge_lora=True, seed=3)  # fmt: skip
    assert run(spec, tmp_path / "out").status == "completed"
    view = _view(spec, tmp_path / "out", tmp_path / "v")
    labels = stored_labels(view)
    assert labels["num_labels"] == len(load_inputs(spec).data.label_names or [])
    auto = AutoModelForSequenceClassification
    loaded = _state(load_trained(view, auto, label_kwargs=labels))
    merged = _state(auto.from_pretrained(tmp_path / "out" / "model"))
    assert max_abs_diff(loaded, merged) < 1e-6


def test_a_path_or_a_way_out_is_refused(chat_job: tuple[JobSpec, Path], tmp_path: Path) -> None:
    spec, out = chat_job
    outside = tmp_path / "outside"
    build_builtin(spec.model, spec.seed, AutoModelForCausalLM, {}).save_pretrained(outside)
    named = tmp_path / "named"
    shutil.copytree(out / "adapter", named)
    config = json.loads((named / "adapter_config.json").read_text())
    (named / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": str(outside)})
    )
    with pytest.raises(ModelError, match="not a hub id"):
        load_trained(named, AutoModelForCausalLM, label_kwargs={})
    linked = tmp_path / "linked"
    shutil.copytree(out / "adapter", linked)
    (linked / "base").symlink_to(outside)
    with pytest.raises(ModelError, match="outside"):
        load_trained(linked, AutoModelForCausalLM, label_kwargs={})
    spec_path = spec.model_copy(update={"model": str(named), "lora": None, "merge_lora": False})
    with pytest.raises(ModelError, match="not a hub id"):
        load_model(spec_path, load_tokenizer(spec), None)
    forged = _view(spec, out, tmp_path / "forged")
    (forged / "gradacc_base.json").write_text(json.dumps({"model": str(outside), "seed": 1}))
    with pytest.raises(ModelError, match="no built-in model"):
        load_trained(forged, AutoModelForCausalLM, label_kwargs={})
