"""Load a job's data (built-in, local file or hub), hold out an eval split, and tokenize it.

The result is, per split, token ids per row, a label per row (classification), and the number of
supervised *items* per row — 1 for classification, ``len(ids) - 1`` for a causal LM (the first
token predicts nothing). Item counts drive the exact loss normalisation. The rows live in
memory-mapped Arrow files (``trainer_core.data.tokenized``), cached by ``trainer_core.data.cache`` when the
caller passes a ``DataCache``: a second job or a resume on the same data skips tokenization.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import pyarrow.compute as pc
from transformers import PreTrainedTokenizerBase

from trainer_core.builtin.corpus import BUILDERS
from trainer_core.data.cache import DataCache
from trainer_core.data.cache_key import backend_json, cache_key, data_identity
from trainer_core.data.tokenized import (
    ArrowRows,
    IntColumn,
    read_layout,
    read_table,
    tokenize_to,
    write_layout,
)
from trainer_core.spec.errors import DatasetError
from trainer_core.spec.job import JobSpec
from trainer_core.spec.sources import classify_source, local_path

_FILE_FORMATS = {".csv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


@dataclass(frozen=True)
class TokenizedSplit:
    """Lists in tests; ``ArrowRows``/``IntColumn`` views of memory-mapped Arrow in a job."""

    input_ids: Sequence[Any]  # rows of token ids: lists, or numpy views of the Arrow table
    labels: Sequence[int] | None  # classification only
    items: Sequence[int]  # supervised items per row

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class JobData:
    train: TokenizedSplit
    eval: TokenizedSplit
    label_names: list[str] | None  # classification only, index = class id


def _load_source(source: str, param: str) -> datasets.DatasetDict:
    kind = classify_source(source)
    if kind == "builtin":
        build = BUILDERS[source]  # the spec admits only known builtins
        return datasets.DatasetDict(
            {split: datasets.Dataset.from_dict(build(split)) for split in ("train", "validation")}
        )
    if kind == "file":  # the service resolves upload ids to paths; reaching here is a bug there
        raise DatasetError(f"{param}: uploaded file {source!r} was not resolved", param=param)
    if kind == "local":
        path = local_path(source)
        if path.is_dir():
            return _load_hub_or_folder(str(path), "", source, param)  # a folder of data files
        if not path.is_file():
            raise DatasetError(f"{param}: file {source!r} does not exist", param=param)
        fmt = _FILE_FORMATS.get(path.suffix.lower())
        if fmt is None:
            raise DatasetError(f"{param}: unsupported file type {path.suffix!r}", param=param)
        try:
            return datasets.DatasetDict(
                {"train": datasets.load_dataset(fmt, data_files=str(path), split="train")}
            )
        except Exception as exc:  # a malformed file: report it, don't crash with a traceback
            raise DatasetError(f"{param}: cannot read {source!r}: {exc}", param=param) from exc
    name, _, config = source.partition(":")
    return _load_hub_or_folder(name, config, source, param)


def _load_hub_or_folder(name: str, config: str, source: str, param: str) -> datasets.DatasetDict:
    try:
        loaded = datasets.load_dataset(name, config or None)
    except Exception as exc:
        raise DatasetError(
            f"{param}: cannot load hub dataset {source!r} (offline or unknown?): {exc}", param=param
        ) from exc
    if not isinstance(loaded, datasets.DatasetDict) or "train" not in loaded:
        raise DatasetError(f"{param}: hub dataset {source!r} has no 'train' split", param=param)
    return loaded


def _train_and_eval(spec: JobSpec) -> tuple[datasets.Dataset, datasets.Dataset]:
    train_dict = _load_source(spec.dataset, "dataset")
    train = train_dict["train"]
    if spec.eval_dataset is not None:
        eval_dict = _load_source(spec.eval_dataset, "eval_dataset")
        split = "validation" if "validation" in eval_dict else "train"
        return train, eval_dict[split]
    if "validation" in train_dict:
        return train, train_dict["validation"]
    if len(train) < 2:
        raise DatasetError(
            "dataset: needs at least 2 rows to hold out an eval split", param="dataset"
        )
    # Deterministic hold-out: the same seed gives the same split on every backend.
    parts = train.train_test_split(
        test_size=spec.validation_split_percentage / 100, seed=spec.seed, shuffle=True
    )
    return parts["train"], parts["test"]


def _check_columns(ds: datasets.Dataset, spec: JobSpec, param: str) -> None:
    needed = [("text_column", spec.text_column)]
    if spec.resolved_label_column is not None:
        needed.append(("label_column", spec.resolved_label_column))
    for field, column in needed:
        if column not in ds.column_names:
            raise DatasetError(
                f"{field}: column {column!r} not found in {param} (columns: {ds.column_names})",
                param=field,
            )


def _label_names(ds: datasets.Dataset, column: str) -> list[str]:
    """Distinct labels, read in Arrow batches so a large split never becomes a Python list."""
    unique: set[Any] = set()
    for batch in ds.with_format("arrow").iter(batch_size=100_000):
        unique.update(pc.unique(batch.column(column)).to_pylist())
    if all(isinstance(v, int) and not isinstance(v, bool) for v in unique):
        return [str(v) for v in sorted(unique)]  # ints keep their numeric order
    return sorted(str(v) for v in unique)


def _prepared(spec: JobSpec) -> tuple[datasets.Dataset, datasets.Dataset, list[str] | None]:
    train_ds, eval_ds = _train_and_eval(spec)
    _check_columns(train_ds, spec, "dataset")
    _check_columns(eval_ds, spec, "eval_dataset")
    if spec.max_train_samples is not None:
        train_ds = train_ds.select(range(min(spec.max_train_samples, len(train_ds))))
    if spec.max_eval_samples is not None:
        eval_ds = eval_ds.select(range(min(spec.max_eval_samples, len(eval_ds))))
    label_names = None
    if spec.resolved_label_column is not None:
        label_names = _label_names(train_ds, spec.resolved_label_column)
        if len(label_names) < 2:
            raise DatasetError(
                "label_column: need at least 2 distinct labels", param="label_column"
            )
    return train_ds, eval_ds, label_names


def _max_length(spec: JobSpec, tokenizer: PreTrainedTokenizerBase) -> int:
    # Never longer than the model's positions (tokenizers record it; huge values mean "unset").
    limit = tokenizer.model_max_length
    return min(spec.max_seq_length, limit) if limit < 1_000_000 else spec.max_seq_length


def _build(
    folder: Path,
    spec: JobSpec,
    tokenizer: PreTrainedTokenizerBase,
    prepared: tuple[datasets.Dataset, datasets.Dataset, list[str] | None],
    fingerprint: str,
) -> None:
    train_ds, eval_ds, label_names = prepared
    encode = {
        "tokenizer_json": backend_json(tokenizer),
        "max_length": _max_length(spec, tokenizer),
        "text_column": spec.text_column,
        "label_column": spec.resolved_label_column,
        "label_index": None if label_names is None else {n: i for i, n in enumerate(label_names)},
    }
    layout: dict[str, Any] = {"label_names": label_names}
    for name, ds, param in (("train", train_ds, "dataset"), ("eval", eval_ds, "eval_dataset")):
        try:
            layout[name] = tokenize_to(ds, folder, name, fingerprint, **encode)
        except Exception as exc:  # raised in a map worker: name the field it is about
            text = str(exc)
            for field in ("text_column", "label_column"):
                if field in text:
                    message = text[text.index(field) :].splitlines()[0]
                    raise DatasetError(f"{message} ({param})", param=field) from exc
            raise
    write_layout(folder, layout)


def _opened(folder: Path) -> JobData:
    layout = read_layout(folder)
    splits = []
    for name in ("train", "eval"):
        table = read_table(folder, layout[name])
        labels = (
            IntColumn(table.column("label").to_numpy()) if "label" in table.column_names else None
        )
        items = IntColumn(table.column("n_items").to_numpy())
        splits.append(TokenizedSplit(ArrowRows(table.column("input_ids")), labels, items))
    train, evaluation = splits
    if len(train) == 0 or len(evaluation) == 0:
        raise DatasetError("dataset: no usable rows after tokenization", param="dataset")
    return JobData(train=train, eval=evaluation, label_names=layout["label_names"])


def load_job_data(
    spec: JobSpec, tokenizer: PreTrainedTokenizerBase, cache: DataCache | None = None
) -> JobData:
    """Tokenized train and eval splits. With a cache, a second job (or a resume) on the same
    data, tokenizer, ``max_seq_length``, columns and task opens the cached files instead."""
    key = description = None
    if cache is not None and (sources := data_identity(spec)) is not None:
        key, description = cache_key(spec, tokenizer, sources)
        if (entry := cache.lookup(key)) is not None:
            return _opened(entry)
    prepared = _prepared(spec)
    if cache is None:
        folder = Path(tempfile.mkdtemp(prefix="gradacc-data-"))
        try:
            _build(folder, spec, tokenizer, prepared, fingerprint=folder.name)
            return _opened(folder)  # mapped: the files stay readable after the folder is gone
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    if key is None or description is None:  # a folder or a hub dataset: datasets' fingerprint
        sources = [prepared[0]._fingerprint, prepared[1]._fingerprint]
        key, description = cache_key(spec, tokenizer, sources)
    with cache.building(key, description) as folder:
        _build(folder, spec, tokenizer, prepared, fingerprint=key)
    return _opened(cache.root / key)
