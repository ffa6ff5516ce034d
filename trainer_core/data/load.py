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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from transformers import PreTrainedTokenizerBase

from trainer_core.data.cache import DataCache
from trainer_core.data.cache_key import cache_key, data_identity
from trainer_core.data.chat import TOO_LONG
from trainer_core.data.dpo import ROW_ERROR
from trainer_core.data.encoding import check_columns, encoding_for
from trainer_core.data.sources import load_source
from trainer_core.data.splits import PreferenceSplit, TokenizedSplit
from trainer_core.data.tokenized import (
    CUT_COLUMNS,
    ArrowRows,
    IntColumn,
    column_numpy,
    read_layout,
    read_table,
    tokenize_to,
    write_layout,
)
from trainer_core.spec.chat import IncompletePairs, ResolvedFormat
from trainer_core.spec.errors import DatasetError
from trainer_core.spec.job import JobSpec

if TYPE_CHECKING:  # datasets costs ~0.4 s to import; a cached job never needs it
    import datasets


@dataclass(frozen=True)
class JobData:
    train: TokenizedSplit
    eval: TokenizedSplit
    label_names: list[str] | None  # classification only, index = class id
    format: str = "text"  # what the rows were read as (trainer_core.spec.chat)
    # Rows left out for having nothing to train (no trained part at all), per split.
    dropped: dict[str, int] = field(default_factory=dict)
    # Per split, what truncation at max_seq_length cut: {"rows", "tokens", "trained_tokens"}.
    truncated: dict[str, dict[str, int]] = field(default_factory=dict)
    held_out: int = 0  # training rows held out as the eval split (validation_split_percentage)


@dataclass(frozen=True)
class Prepared:
    """The splits as loaded, before tokenizing."""

    train: datasets.Dataset
    eval: datasets.Dataset
    label_names: list[str] | None
    format: ResolvedFormat
    held_out: int = 0


def _train_and_eval(spec: JobSpec) -> tuple[datasets.Dataset, datasets.Dataset, int]:
    """The train and eval splits, and how many training rows were held out as the eval split."""
    train_dict = load_source(spec.dataset, "dataset")
    train = train_dict["train"]
    if spec.eval_dataset is not None:
        eval_dict = load_source(spec.eval_dataset, "eval_dataset")
        split = "validation" if "validation" in eval_dict else "train"
        return train, eval_dict[split], 0
    if "validation" in train_dict:
        return train, train_dict["validation"], 0
    if spec.validation_split_percentage == 0:  # nothing held out: every row trains, no eval
        if spec.load_best_model_at_end or spec.early_stopping_patience is not None:
            raise DatasetError(
                "validation_split_percentage: 0 holds nothing out, and selecting the best model "
                "or stopping early needs an evaluation: give eval_dataset (validation_file)",
                param="validation_split_percentage",
            )
        return train, train.select(range(0)), 0
    if len(train) < 2:
        raise DatasetError(
            "dataset: needs at least 2 rows to hold out an eval split", param="dataset"
        )
    # Deterministic hold-out: the same seed gives the same split on every backend.
    parts = train.train_test_split(
        test_size=spec.validation_split_percentage / 100, seed=spec.seed, shuffle=True
    )
    return parts["train"], parts["test"], len(parts["test"])


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
    train_ds, eval_ds, held_out = _train_and_eval(spec)
    try:
        fmt = spec.format_for(train_ds.column_names)
    except IncompletePairs as exc:
        raise DatasetError(f"dataset: {exc}", param="dataset") from None
    if (fmt == "preference") != (spec.method == "dpo"):
        raise DatasetError(
            f"method: {spec.method} does not train {fmt} rows; dpo trains preference rows (OpenAI's "
            "input, preferred_output, non_preferred_output, or prompt, chosen, rejected) and only "
            f"them (the dataset's columns: {train_ds.column_names})",
            param="method",
        )
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
    return Prepared(train_ds, eval_ds, label_names, fmt, held_out)


FIELDS_IN_ERRORS = (
    "text_column",
    "label_column",
    "messages_column",
    "prompt_column",
    "chat_template",
)
NO_TRUNCATION = {"rows": 0, "tokens": 0, "trained_tokens": 0}


def _field_error(exc: Exception, param: str) -> DatasetError | None:
    """An encoder's error (raised in a map worker) as a DatasetError naming the field it is
    about: an over-long row the split's own (``dataset``, ``eval_dataset``)."""
    text = str(exc)
    if ROW_ERROR in text:  # a preference row: "preference row N: field path: what"
        message = text[text.index(ROW_ERROR) + len(ROW_ERROR) + 1 :].splitlines()[0]
        return DatasetError(f"{param}: row {message}", param=param)
    if TOO_LONG in text:
        message = text[text.index("row ") :].splitlines()[0]
        return DatasetError(f"{param}: {message}", param=param)
    for spec_field in FIELDS_IN_ERRORS:
        if spec_field in text:
            message = text[text.index(spec_field) :].splitlines()[0]
            return DatasetError(f"{message} ({param})", param=spec_field)
    return None


def _truncation(folder: Path, files: list[str]) -> dict[str, int]:
    """What truncation cut from a split's kept rows (chat and prompt-completion rows count it)."""
    table = read_table(folder, files)
    if CUT_COLUMNS[0] not in table.column_names:
        return NO_TRUNCATION
    tokens, items = (column_numpy(table.column(name)) for name in CUT_COLUMNS)
    return {
        "rows": int((tokens > 0).sum()),
        "tokens": int(tokens.sum()),
        "trained_tokens": int(items.sum()),
    }


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
    truncated: dict[str, dict[str, int]] = {}
    splits = (("train", prepared.train, "dataset"), ("eval", prepared.eval, "eval_dataset"))
    for name, ds, param in splits:
        if len(ds) == 0:  # no eval split (validation_split_percentage 0)
            layout[name], dropped[name], truncated[name] = [], 0, NO_TRUNCATION
            continue
        try:
            layout[name], kept = tokenize_to(
                ds,
                folder,
                name,
                fingerprint,
                encoding.encode,
                with_indices=encoding.with_indices,
                **encoding.kwargs,
            )
        except Exception as exc:  # raised in a map worker: name the field it is about
            named = _field_error(exc, param)
            if named is None:
                raise
            raise named from exc
        dropped[name] = len(ds) - kept
        truncated[name] = _truncation(folder, layout[name])
    layout |= {"dropped": dropped, "truncated": truncated, "held_out": prepared.held_out}
    write_layout(folder, layout)


def _opened(folder: Path) -> JobData:
    layout = read_layout(folder)
    splits = []
    for name in ("train", "eval"):
        if not layout[name]:  # no eval split: nothing held out, no eval_dataset
            splits.append(TokenizedSplit([], None, [], None))
            continue
        table = read_table(folder, layout[name])
        labels = (
            IntColumn(column_numpy(table.column("label")))
            if "label" in table.column_names
            else None
        )
        items = IntColumn(column_numpy(table.column("n_items")))
        names = table.column_names
        mask = ArrowRows(table.column("loss_mask")) if "loss_mask" in names else None
        ids = ArrowRows(table.column("input_ids"))
        if "rejected_ids" in names:
            rejected = ArrowRows(table.column("rejected_ids"))
            rejected_mask = ArrowRows(table.column("rejected_mask"))
            chosen_items = IntColumn(column_numpy(table.column("chosen_items")))
            splits.append(
                PreferenceSplit(ids, None, items, mask, rejected, rejected_mask, chosen_items)
            )
            continue
        splits.append(TokenizedSplit(ids, labels, items, mask))
    train, evaluation = splits
    dropped = layout.get("dropped", {})
    for split, name, param in ((train, "train", "dataset"), (evaluation, "eval", "eval_dataset")):
        if len(split) == 0 and layout[name]:
            raise DatasetError(
                f"max_seq_length: no usable rows in {param} after tokenization (its "
                f"{dropped.get(name, 0)} rows have nothing to train after truncation at "
                "max_seq_length: raise it, or check the trained parts of the rows)",
                param="max_seq_length",
            )
    return JobData(
        train,
        evaluation,
        layout["label_names"],
        layout.get("format", "text"),
        dropped,
        layout.get("truncated", {}),
        layout.get("held_out", 0),
    )


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
