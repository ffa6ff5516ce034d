"""Tokenized rows in Arrow: written by ``datasets.map(batched=True, num_proc=...)``, read back
memory-mapped.

A split is one Arrow table with ``input_ids`` (list<int32>), ``n_items`` (int32: 1 for
classification, ``len - 1`` for a causal LM's text, the trained tokens after the shift for chat and
prompt-completion rows), for classification ``label`` (int32), and for chat and prompt-completion
rows ``loss_mask`` (list<uint8>: 1 where a token is trained; ``trainer_core.data.chat``) and
what truncation cut from each row (``CUT_COLUMNS``: tokens, and trained tokens after the shift).
Reading it maps the files: a row is a zero-copy numpy view, so a process holds O(batch) rows in
Python, not O(dataset), and the epoch plan needs only the compact ``n_items`` column.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

if TYPE_CHECKING:
    import datasets

LAYOUT = "layout.json"
CUT_COLUMNS = ("cut_tokens", "cut_items")  # chat and prompt-completion rows: what truncation cut
ROWS_PER_PROCESS = 20_000  # below this a second process costs more than it saves
_TOKENIZERS: dict[str, Tokenizer] = {}


class IntColumn(Sequence[int]):
    """A read-only integer column (numpy underneath) that behaves like ``list[int]``."""

    def __init__(self, values: np.ndarray) -> None:
        self.array = values

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [int(v) for v in self.array[index]]
        return int(self.array[index])

    def __iter__(self) -> Iterator[int]:
        return iter(self.array.tolist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


def numpy_of(array: pa.Array) -> np.ndarray:
    """A zero-copy numpy view of an integer Arrow array without nulls. pyarrow's own
    ``to_numpy`` imports pandas on first use (0.2 s of every job's start)."""
    if not pa.types.is_integer(array.type) or array.null_count:
        raise ValueError(f"expected integers without nulls, got {array.type}")
    kind = "int" if pa.types.is_signed_integer(array.type) else "uint"
    dtype = np.dtype(f"{kind}{array.type.bit_width}")
    data = array.buffers()[1]
    return np.frombuffer(data, dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def column_numpy(column: pa.ChunkedArray) -> np.ndarray:
    """An integer column's values in one numpy array (a copy only when it has several chunks)."""
    parts = [numpy_of(chunk) for chunk in column.chunks]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class ArrowRows(Sequence[np.ndarray]):
    """Token ids per row from a (possibly chunked) Arrow list column; row i is a numpy view."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self._offsets = [numpy_of(c.offsets) for c in column.chunks]
        self._values = [numpy_of(c.values) for c in column.chunks]
        self._starts = np.cumsum([0] + [len(c) for c in column.chunks])

    def __len__(self) -> int:
        return int(self._starts[-1])

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, index: slice) -> list[np.ndarray]: ...
    def __getitem__(self, index: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        chunk = int(np.searchsorted(self._starts, index, side="right")) - 1
        row = index - int(self._starts[chunk])
        offsets = self._offsets[chunk]
        view: np.ndarray = self._values[chunk][offsets[row] : offsets[row + 1]]
        return view

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(np.array_equal(a, b) for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def lengths(self) -> np.ndarray:
        """Every row's token count, from the offsets alone (no row is read)."""
        if not self._offsets:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.diff(o) for o in self._offsets]).astype(np.int64)


def row_lengths(rows: Sequence[Any]) -> np.ndarray:
    """Token counts of ``rows`` (an ``ArrowRows`` reads them from its offsets)."""
    if isinstance(rows, ArrowRows):
        return rows.lengths()
    return np.asarray([len(row) for row in rows], dtype=np.int64)


def tokenizer_for(tokenizer_json: str, max_length: int | None) -> Tokenizer:
    """The Rust tokenizer of this JSON definition, truncating at ``max_length`` (None: never;
    one per process and definition)."""
    key = f"{max_length}:{tokenizer_json}"
    if key not in _TOKENIZERS:
        tokenizer = Tokenizer.from_str(tokenizer_json)
        tokenizer.no_padding()
        if max_length is not None:
            tokenizer.enable_truncation(max_length)  # what tokenizer(truncation=True) does
        _TOKENIZERS[key] = tokenizer
    return _TOKENIZERS[key]


def encode_batch(
    batch: pa.Table,
    *,
    tokenizer_json: str,
    max_length: int,
    text_column: str,
    label_column: str | None,
    label_index: dict[str, int] | None,
) -> pa.Table:
    """One ``map`` batch: Arrow in, Arrow out, no Python list per row kept. A causal-LM row of
    fewer than 2 tokens predicts nothing and is dropped."""
    texts = batch.column(text_column).to_pylist()
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("text_column: every row must hold a string")
    ids = [e.ids for e in tokenizer_for(tokenizer_json, max_length).encode_batch_fast(texts)]
    if label_index is None:
        lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
        return rows_table(ids, lengths - 1).filter(pa.array(lengths >= 2))
    assert label_column is not None
    try:
        labels = [label_index[str(v)] for v in batch.column(label_column).to_pylist()]
    except KeyError as exc:
        raise ValueError(f"label_column: label {exc.args[0]!r} not seen in training") from exc
    return rows_table(ids, np.ones(len(ids), dtype=np.int32), labels=labels)


def _lists(rows: Sequence[Sequence[int]] | Sequence[np.ndarray], dtype: Any) -> pa.ListArray:
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype, count=int(lengths.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))


def rows_table(
    ids: Sequence[Sequence[int]],
    items: np.ndarray,
    *,
    labels: list[int] | None = None,
    loss_mask: Sequence[np.ndarray] | None = None,
    cut: dict[str, np.ndarray] | None = None,
) -> pa.Table:
    """A split's rows as its Arrow table (the columns of the module docstring; ``cut``: the
    truncation's counts per row, ``CUT_COLUMNS``)."""
    columns: dict[str, Any] = {"input_ids": _lists(ids, np.int32), "n_items": pa.array(items)}
    if labels is not None:
        columns["label"] = pa.array(labels, pa.int32())
    if loss_mask is not None:
        columns["loss_mask"] = _lists(loss_mask, np.uint8)
    for name, values in (cut or {}).items():
        columns[name] = pa.array(values, pa.int32())
    return pa.table(columns)


def tokenize_to(
    ds: datasets.Dataset,
    folder: Path,
    name: str,
    fingerprint: str,
    encode: Callable[..., pa.Table] = encode_batch,
    *,
    with_indices: bool = False,
    **kwargs: Any,
) -> tuple[list[str], int]:
    """Tokenize ``ds`` with ``encode`` into Arrow files ``folder/name*.arrow``; returns their
    names in order and how many rows were left (a row with nothing to train is dropped)."""
    import datasets

    datasets.disable_progress_bars()  # a job's log gets its own progress, not one bar per map
    cores = len(os.sched_getaffinity(0))
    num_proc = max(1, min(cores, len(ds) // ROWS_PER_PROCESS))
    out = ds.with_format("arrow").map(
        encode,
        with_indices=with_indices,
        batched=True,
        batch_size=2000,
        fn_kwargs=kwargs,
        remove_columns=ds.column_names,
        cache_file_name=str(folder / f"{name}.arrow"),
        load_from_cache_file=False,
        new_fingerprint=f"{fingerprint}-{name}",  # ours: no hashing of the tokenizer by dill
        num_proc=num_proc if num_proc > 1 else None,
        desc=None,
    )
    return [Path(f["filename"]).name for f in out.cache_files], len(out)


def write_layout(folder: Path, layout: dict[str, Any]) -> None:
    (folder / LAYOUT).write_text(json.dumps(layout))


def read_table(folder: Path, files: list[str]) -> pa.Table:
    """Memory-map the files of one split (``datasets`` writes Arrow streams)."""
    tables = [pa.ipc.open_stream(pa.memory_map(str(folder / f))).read_all() for f in files]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def read_layout(folder: Path) -> dict[str, Any]:
    layout: dict[str, Any] = json.loads((folder / LAYOUT).read_text())
    return layout
