"""A source reads nothing outside itself, whatever its own files name (issue 30, H1): a dataset
card listing another tenant's files (in a local folder, and from the hub cache), a folder link
leading out, and a model that is an adapter whose base is another job's model directory. Each
attack is built here as the review reproduced it; without the checks, the victim's rows or
weights are what loads (the positive controls show the same routes do load what is inside)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import constants

from tests.trainer_core.helpers import CAUSAL, make_spec
from trainer_core.data.load import load_job_data
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.cards import UnsafeSource, check_card
from trainer_core.spec.errors import DatasetError, ModelError
from trainer_core.spec.job import JobSpec

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
SECRET = "the victim's secret row"
CARD = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: {}\n---\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another tenant's uploaded rows, as the service stores them: files/<id>/data.jsonl."""
    path = tmp_path / "home" / "files" / "file-0123456789abcdef0123" / "data.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps({"text": f"{SECRET} {i}"}) + "\n" for i in range(8)))
    return path


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    assert constants.is_offline_mode()
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def snapshot(cache: Path, kind: str, repo_id: str) -> Path:
    repo = cache / f"{kind}s--{repo_id.replace('/', '--')}"
    folder = repo / "snapshots" / COMMIT
    folder.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return folder


def causal(dataset: str, **extra: object) -> JobSpec:
    return make_spec(CAUSAL, dataset=dataset, max_eval_samples=4, **extra)


def rows_of(spec: JobSpec) -> str:
    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    return str(tokenizer.decode(list(data.train.input_ids[0])))


def test_a_local_folder_whose_card_globs_another_tenants_files_is_refused(
    tmp_path: Path, victim: Path
) -> None:
    folder = tmp_path / "data" / "evil"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text(CARD.format(f"{victim.parent.parent}/*/data.jsonl"))
    for field in ("dataset", "eval_dataset"):
        spec = causal("builtin:tiny-stories").model_copy(update={field: str(folder)})
        with pytest.raises(DatasetError) as refused:
            rows_of(spec)
        assert refused.value.param == field
        assert "configs[0].data_files" in refused.value.message
        assert str(victim.parent.parent) not in refused.value.message
    # The same folder with a card that stays inside it loads (the check is not a blanket no).
    (folder / "README.md").write_text(CARD.format("rows/*.jsonl"))
    (folder / "rows").mkdir()
    (folder / "rows" / "a.jsonl").write_text(json.dumps({"text": "my own row"}) + "\n")
    (folder / "rows" / "b.jsonl").write_text(json.dumps({"text": "my own row too"}) + "\n")
    assert "my own row" in rows_of(causal(str(folder)))


def test_a_link_out_of_a_dataset_folder_is_refused(tmp_path: Path, victim: Path) -> None:
    folder = tmp_path / "data" / "linked"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").symlink_to(victim)
    with pytest.raises(DatasetError) as refused:
        rows_of(causal(str(folder)))
    assert refused.value.param == "dataset" and "link" in refused.value.message


def test_a_hub_dataset_card_from_the_cache_is_refused(hub_cache: Path, victim: Path) -> None:
    evil = snapshot(hub_cache, "dataset", "attacker/evil")
    (evil / "README.md").write_text(CARD.format(f"{victim.parent.parent}/*/data.jsonl"))
    with pytest.raises(DatasetError) as refused:
        rows_of(causal("attacker/evil"))
    assert refused.value.param == "dataset" and "configs[0].data_files" in refused.value.message
    # A cached hub dataset whose card stays inside its repository loads offline, from the cache.
    good = snapshot(hub_cache, "dataset", "acme/stories")
    (good / "README.md").write_text(CARD.format("data/*.jsonl"))
    (good / "data").mkdir()
    rows = "".join(json.dumps({"text": f"a cached story {i}"}) + "\n" for i in range(8))
    (good / "data" / "train.jsonl").write_text(rows)
    assert "a cached story" in rows_of(causal("acme/stories"))


@pytest.mark.parametrize(
    ("entry", "wrong"),
    [("/srv/home/files/*/data.jsonl", "absolute"), ("~/x.jsonl", "absolute"),
     ("hf://datasets/other/private/x.jsonl", "URL"), ("s3://bucket/x.csv", "URL"),
     ("C:\\\\data\\\\x.csv", "URL"), ("../../files/*/data.jsonl", "'..'"),
     ("data/../../x.jsonl", "'..'")],
)  # fmt: skip
def test_card_entries_that_leave_the_dataset(tmp_path: Path, entry: str, wrong: str) -> None:
    card = tmp_path / "README.md"
    card.write_text(CARD.format(json.dumps(entry)))
    with pytest.raises(UnsafeSource, match=wrong):
        check_card([card], param="dataset")
    data_dir = tmp_path / ".huggingface.yaml"
    data_dir.write_text(f"configs:\n- config_name: x\n  data_dir: {json.dumps(entry)}\n")
    with pytest.raises(UnsafeSource, match=r"configs\[0\]\.data_dir"):
        check_card([data_dir], param="eval_dataset")


def victim_model(tmp_path: Path) -> Path:
    """Another job's final model (jobs/<id>/model) and an adapter trained on it."""
    spec = make_spec(CAUSAL)
    tokenizer = load_tokenizer(spec)
    model = load_model(spec, tokenizer, None)
    folder = tmp_path / "home" / "jobs" / "job_0123456789abcdef0123" / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_adapter(folder: Path, base: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], task_type="CAUSAL_LM")
    get_peft_model(AutoModelForCausalLM.from_pretrained(base), lora).save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base)  # what the attacker ships


def test_an_adapter_whose_base_is_another_jobs_model_is_refused(
    tmp_path: Path, hub_cache: Path
) -> None:
    base = victim_model(tmp_path)
    evil = snapshot(hub_cache, "model", "attacker/evil")
    write_adapter(evil, base)
    # A config lets AutoTokenizer read the repository's tokenizer; for a hub id transformers
    # still loads the base first (it looks for config.json beside a local path only).
    (evil / "config.json").write_text((base / "config.json").read_text())
    local = tmp_path / "data" / "evil-adapter"
    write_adapter(local, base)
    for model in ("attacker/evil", str(local)):
        spec = causal("builtin:tiny-stories").model_copy(update={"model": model})
        with pytest.raises(ModelError) as refused:
            load_model(spec, load_tokenizer(spec), None)
        assert refused.value.param == "model" and "adapter" in refused.value.message
        assert str(base) not in refused.value.message
