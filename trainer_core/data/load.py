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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from transformers import PreTrainedTokenizerBase

from trainer_core.data.cache import DataCache
from trainer_core.data.cache_key import cache_key, data_identity
from trainer_core.data.encoding import check_columns, encoding_for
from trainer_core.data.sources import load_source
from trainer_core.data.tokenized import (
    ArrowRows,
    IntColumn,
    column_numpy,
    read_layout,
    read_table,
    tokenize_to,
    write_layout,
)
from trainer_core.spec.chat import ResolvedFormat
from trainer_core.spec.errors import DatasetError
from trainer_core.spec.job import JobSpec

if TYPE_CHECKING:  # datasets costs ~0.4 s to import; a cached job never needs it
    import datasets


@dataclass(frozen=True)
class TokenizedSplit:
    """Lists in tests; ``ArrowRows``/``IntColumn`` views of memory-mapped Arrow in a job."""

    input_ids: Sequence[Any]  # rows of token ids: lists, or numpy views of the Arrow table
    labels: Sequence[int] | None  # classification only
    items: Sequence[int]  # supervised items per row
    loss_mask: Sequence[Any] | None = None  # chat and prompt-completion: 1 where trained

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class JobData:
    train: TokenizedSplit
    eval: TokenizedSplit
    label_names: list[str] | None  # classification only, index = class id
    format: str = "text"  # what the rows were read as (trainer_core.spec.chat)
    # Rows left out for having nothing to train (after truncation and the shift), per split.
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Prepared:
    """The splits as loaded, before tokenizing."""

    train: datasets.Dataset
    eval: datasets.Dataset
    label_names: list[str] | None
    format: ResolvedFormat


def _train_and_eval(spec: JobSpec) -> tuple[datasets.Dataset, datasets.Dataset]:
    train_dict = load_source(spec.dataset, "dataset")
    train = train_dict["train"]
    if spec.eval_dataset is not None:
        eval_dict = load_source(spec.eval_dataset, "eval_dataset")
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


def _label_names(ds: datasets.Dataset, column: str) -> list[str]:
    """Distinct labels, read in Arrow batches so a large split never becomes a Python list. An
    empty cell or a mix of numbers and text is refused, naming its row (1-based)."""
    unique: set[Any] = set()
    seen = 0
    for batch in ds.with_format("arrow").iter(batch_size=100_000):
        values = batch.column(column)
        empty = pc.or_kleene(pc.is_null(values), pc.equal(pc.cast(values, pa.string()), ""))
        if pc.any(empty).as_py():
            row = seen + pc.index(empty, True).as_py() + 1
            raise DatasetError(f"label_column: row {row} has no label", param="label_column")
        unique.update(pc.unique(values).to_pylist())
        seen += len(values)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in unique):
        return [str(v) for v in sorted(unique)]  # ints keep their numeric order
    if not all(isinstance(v, str) for v in unique):
        raise DatasetError("label_column: labels mix numbers and text", param="label_column")
    return sorted(unique)


def _prepared(spec: JobSpec) -> Prepared:
    train_ds, eval_ds = _train_and_eval(spec)
    fmt = spec.format_for(train_ds.column_names)
    check_columns(spec, fmt, train_ds.column_names, "dataset")
    check_columns(spec, fmt, eval_ds.column_names, "eval_dataset")
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
    return Prepared(train_ds, eval_ds, label_names, fmt)


FIELDS_IN_ERRORS = ("text_column", "label_column", "messages_column", "prompt_column",
                    "chat_template")  # fmt: skip


def _build(
    folder: Path,
    spec: JobSpec,
    tokenizer: PreTrainedTokenizerBase,
    prepared: Prepared,
    fingerprint: str,
) -> None:
    encoding = encoding_for(spec, tokenizer, prepared.train.column_names, prepared.label_names)
    layout: dict[str, Any] = {"label_names": prepared.label_names, "format": encoding.format}
    dropped: dict[str, int] = {}
    splits = (("train", prepared.train, "dataset"), ("eval", prepared.eval, "eval_dataset"))
    for name, ds, param in splits:
        try:
            layout[name], kept = tokenize_to(
                ds, folder, name, fingerprint, encoding.encode,
                with_indices=encoding.with_indices, **encoding.kwargs,
            )  # fmt: skip
        except Exception as exc:  # raised in a map worker: name the field it is about
            text = str(exc)
            for spec_field in FIELDS_IN_ERRORS:
                if spec_field in text:
                    message = text[text.index(spec_field) :].splitlines()[0]
                    raise DatasetError(f"{message} ({param})", param=spec_field) from exc
            raise
        dropped[name] = len(ds) - kept
    layout["dropped"] = dropped
    write_layout(folder, layout)


def _opened(folder: Path) -> JobData:
    layout = read_layout(folder)
    splits = []
    for name in ("train", "eval"):
        table = read_table(folder, layout[name])
        labels = (
            IntColumn(column_numpy(table.column("label")))
            if "label" in table.column_names
            else None
        )
        items = IntColumn(column_numpy(table.column("n_items")))
        names = table.column_names
        mask = ArrowRows(table.column("loss_mask")) if "loss_mask" in names else None
        splits.append(TokenizedSplit(ArrowRows(table.column("input_ids")), labels, items, mask))
    train, evaluation = splits
    dropped = layout.get("dropped", {})
    for split, param in ((train, "dataset"), (evaluation, "eval_dataset")):
        if len(split) == 0:
            left_out = dropped.get("train" if param == "dataset" else "eval", 0)
            raise DatasetError(
                f"{param}: no usable rows after tokenization ({left_out} rows had nothing to "
                "train after truncation at max_seq_length: raise it, or check the trained "
                "parts of the rows)",
                param=param,
            )
    return JobData(train, evaluation, layout["label_names"], layout.get("format", "text"), dropped)


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
        sources = [prepared.train._fingerprint, prepared.eval._fingerprint]
        key, description = cache_key(spec, tokenizer, sources)
    with cache.building(key, description) as folder:
        _build(folder, spec, tokenizer, prepared, fingerprint=key)
    return _opened(cache.root / key)
