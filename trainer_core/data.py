"""Load a job's data (built-in, local file or hub), hold out an eval split, and tokenize it.

The result is plain Python lists: token ids per row, a label per row (classification), and the
number of supervised *items* per row — 1 for classification, ``len(ids) - 1`` for a causal LM
(the first token predicts nothing). Item counts drive the exact loss normalisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import datasets
from transformers import PreTrainedTokenizerBase

from trainer_core.builtin.corpus import BUILDERS
from trainer_core.errors import DatasetError
from trainer_core.sources import classify_source, local_path
from trainer_core.spec import JobSpec

_FILE_FORMATS = {".csv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


@dataclass(frozen=True)
class TokenizedSplit:
    input_ids: list[list[int]]
    labels: list[int] | None  # classification only
    items: list[int]  # supervised items per row

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


def _label_ids(values: list[Any], names: list[str], param: str) -> list[int]:
    index = {name: i for i, name in enumerate(names)}
    try:
        return [index[str(value)] for value in values]
    except KeyError as exc:
        raise DatasetError(
            f"label_column: {param} has label {exc.args[0]!r} not seen in training",
            param="label_column",
        ) from exc


def _label_names(values: list[Any]) -> list[str]:
    unique = set(values)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in unique):
        return [str(v) for v in sorted(unique)]  # ints keep their numeric order
    return sorted(str(v) for v in unique)


def _tokenize(
    ds: datasets.Dataset, spec: JobSpec, tokenizer: PreTrainedTokenizerBase
) -> list[list[int]]:
    texts = list(ds[spec.text_column])
    if not all(isinstance(t, str) for t in texts):
        raise DatasetError("text_column: every row must hold a string", param="text_column")
    # Never longer than the model's positions (tokenizers record it; huge values mean "unset").
    limit = (
        tokenizer.model_max_length
        if tokenizer.model_max_length < 1_000_000
        else spec.max_seq_length
    )
    encoded = tokenizer(texts, truncation=True, max_length=min(spec.max_seq_length, limit))
    return [list(ids) for ids in encoded["input_ids"]]


def load_job_data(spec: JobSpec, tokenizer: PreTrainedTokenizerBase) -> JobData:
    train_ds, eval_ds = _train_and_eval(spec)
    _check_columns(train_ds, spec, "dataset")
    _check_columns(eval_ds, spec, "eval_dataset")
    if spec.max_train_samples is not None:
        train_ds = train_ds.select(range(min(spec.max_train_samples, len(train_ds))))
    if spec.max_eval_samples is not None:
        eval_ds = eval_ds.select(range(min(spec.max_eval_samples, len(eval_ds))))
    label_names = None
    splits: list[TokenizedSplit] = []
    if spec.resolved_label_column is not None:
        label_names = _label_names(list(train_ds[spec.resolved_label_column]))
        if len(label_names) < 2:
            raise DatasetError(
                "label_column: need at least 2 distinct labels", param="label_column"
            )
    for ds, param in ((train_ds, "dataset"), (eval_ds, "eval_dataset")):
        ids = _tokenize(ds, spec, tokenizer)
        if label_names is not None:
            labels = _label_ids(list(ds[spec.resolved_label_column]), label_names, param)
            splits.append(TokenizedSplit(ids, labels, [1] * len(ids)))
            continue
        keep = [i for i, row in enumerate(ids) if len(row) >= 2]  # a 1-token row predicts nothing
        rows = [ids[i] for i in keep]
        splits.append(TokenizedSplit(rows, None, [len(row) - 1 for row in rows]))
    train, evaluation = splits
    if len(train) == 0 or len(evaluation) == 0:
        raise DatasetError("dataset: no usable rows after tokenization", param="dataset")
    return JobData(train=train, eval=evaluation, label_names=label_names)
