"""Data and model sources: local files, hold-out splits, local model directories, clear errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.trainer_core.helpers import make_spec, run
from trainer_core.data.load import load_job_data
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.errors import DatasetError, ModelError
from trainer_core.spec.job import JobSpec

ROWS = [{"review": f"{'great fun' if i % 2 else 'dull and bad'} film number {i}", "stars": ["neg", "pos"][i % 2]}
        for i in range(60)]  # fmt: skip


def _write(path: Path) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    elif path.suffix == ".csv":
        path.write_text("review,stars\n" + "".join(f"{r['review']},{r['stars']}\n" for r in ROWS))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(ROWS), path)
    return path


def _spec(dataset: str, **extra: object) -> JobSpec:
    return JobSpec(
        model="builtin:tiny-bert",
        dataset=dataset,
        text_column="review",
        label_column="stars",
        **extra,
    )


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_local_files_with_deterministic_holdout(tmp_path: Path, suffix: str) -> None:
    spec = _spec(str(_write(tmp_path / f"data{suffix}")), validation_split_percentage=20)
    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    again = load_job_data(spec, tokenizer)
    assert (len(data.train), len(data.eval)) == (48, 12)
    assert data.eval.input_ids == again.eval.input_ids  # the same rows every time
    assert data.label_names == ["neg", "pos"]
    assert set(data.train.labels or []) == {0, 1}


def test_missing_file_and_columns_name_the_field(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(_spec("builtin:sentiment"))
    with pytest.raises(DatasetError) as missing:
        load_job_data(_spec(str(tmp_path / "nope.csv")), tokenizer)
    assert missing.value.param == "dataset" and "does not exist" in missing.value.message
    path = str(_write(tmp_path / "d.jsonl"))
    with pytest.raises(DatasetError) as no_label:
        load_job_data(_spec(path).model_copy(update={"label_column": "rating"}), tokenizer)
    assert no_label.value.param == "label_column"
    with pytest.raises(DatasetError) as no_text:
        load_job_data(_spec(path).model_copy(update={"text_column": "body"}), tokenizer)
    assert no_text.value.param == "text_column"


def test_local_model_directory_round_trip(tmp_path: Path) -> None:
    """A model saved by one job trains again from its directory (save_pretrained format)."""
    first = make_spec(
        {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"},
        num_train_epochs=1,
        max_train_samples=40,
    )
    run(first, tmp_path / "a")
    second = first.model_copy(update={"model": str(tmp_path / "a" / "model")})
    result = run(second, tmp_path / "b")
    assert result.status == "completed"
    assert result.metrics[0]["eval_loss"] < 5


def test_unreachable_hub_id_fails_fast_and_clearly() -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    spec = JobSpec(model="gradacc-test/does-not-exist", dataset="builtin:sentiment")
    with pytest.raises(ModelError) as info:
        load_model(spec, load_tokenizer(spec), ["a", "b"])
    assert info.value.param == "model" and "does-not-exist" in info.value.message


def test_cuda_requested_without_a_gpu_names_the_device_field(tmp_path: Path) -> None:
    import torch

    from trainer_core.spec.errors import JobError

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    spec = JobSpec(model="builtin:tiny-bert", dataset="builtin:sentiment", device="cuda")
    with pytest.raises(JobError) as info:
        run(spec, tmp_path)
    assert info.value.param == "device"
