"""What an upload must be: a dataset ``datasets`` can read, or a safetensors-only model archive.

Datasets are read with pyarrow, the reader ``datasets`` itself uses for these formats, in
streaming batches (constant memory, no cache folder, no import of ``datasets`` in the API).
A JSON array is streamed (``api.uploads.jsonrows``). Model archives: ``api.uploads.archives``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pa_parquet

from api.uploads.arrow import open_csv, open_jsonl, type_change, with_growing_blocks
from api.uploads.jsonrows import array_shape, first_bad_line, starts_array
from gradacc.errors import InvalidRequest

log = logging.getLogger(__name__)

DATASET_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
ARCHIVE_SUFFIXES = {".tar.gz": "tar.gz", ".tgz": "tar.gz", ".zip": "zip"}


def dataset_format(filename: str) -> str:
    fmt = DATASET_SUFFIXES.get(Path(filename).suffix.lower())
    if fmt is None:
        kinds = ", ".join(DATASET_SUFFIXES)
        raise InvalidRequest(f"unsupported dataset type {filename!r}; use {kinds}", param="file")
    return fmt


def archive_format(filename: str) -> str:
    lower = filename.lower()
    for suffix, fmt in ARCHIVE_SUFFIXES.items():
        if lower.endswith(suffix):
            return fmt
    raise InvalidRequest(
        "a model is a .tar.gz or .zip of a save_pretrained directory", param="file"
    )


def inspect_dataset(path: Path, fmt: str) -> dict[str, Any]:
    """``{"format", "rows", "columns"}``; 422 naming the problem when it cannot be read."""
    try:
        rows, columns = _READERS[fmt](path)
    except (pa.ArrowException, ValueError, OSError, UnicodeDecodeError) as exc:
        refusal = type_change(exc, param="file", path=path)
        if refusal is not None:
            raise refusal from exc
        raise InvalidRequest(
            f"cannot read it as {fmt}: {_reason(exc, path, fmt)}", param="file"
        ) from exc
    if rows == 0 or not columns:
        raise InvalidRequest(f"the {fmt} file has no rows", param="file")
    return {"format": fmt, "rows": rows, "columns": columns}


def _reason(exc: Exception, path: Path, fmt: str) -> str:
    """The reader's words without the server's paths (an OS error's are logged, not shown); for
    JSON lines that do not parse, the first such line, counted from 1 (pyarrow's "row" is not)."""
    if isinstance(exc, OSError) and not isinstance(exc, pa.ArrowException):
        log.warning("reading an upload failed: %r", exc)
        return "the file could not be read"
    if "JSON parse error" in str(exc) and fmt in ("jsonl", "json") and not starts_array(path):
        bad = first_bad_line(path)
        if bad is not None:
            return bad
    return str(exc).replace(str(path.parent), "<upload>")


def _streamed(
    path: Path, open_reader: Callable[[pa.NativeFile, int], Any]
) -> tuple[int, list[str]]:
    def read(block: int) -> tuple[int, list[str]]:
        with pa.OSFile(str(path)) as source:
            reader = open_reader(source, block)
            return sum(batch.num_rows for batch in reader), list(reader.schema.names)

    return with_growing_blocks(read)


def _csv(path: Path) -> tuple[int, list[str]]:
    return _streamed(path, open_csv)


def _jsonl(path: Path) -> tuple[int, list[str]]:
    return _streamed(path, open_jsonl)


def _json(path: Path) -> tuple[int, list[str]]:
    """One array of objects (streamed, one row at a time), or JSON lines under a .json name:
    what ``datasets`` accepts."""
    if starts_array(path):
        return array_shape(path)
    return _jsonl(path)


def _parquet(path: Path) -> tuple[int, list[str]]:
    parquet = pa_parquet.ParquetFile(path)
    return parquet.metadata.num_rows, list(parquet.schema_arrow.names)


_READERS: dict[str, Callable[[Path], tuple[int, list[str]]]] = {
    "csv": _csv,
    "jsonl": _jsonl,
    "json": _json,
    "parquet": _parquet,
}
