"""Reading an uploaded file with pyarrow in constant memory, shared by the upload's checks.

pyarrow reads a file in blocks and keeps several in flight: at its default of 1 MiB they were
+83 MB of the API's memory while a 256 MB CSV was checked, at 256 KiB +44 MB (and no slower:
531 MB/s on one thread). A row longer than a block is "straddling": the read starts over with 16
times the block, up to MAX_BLOCK_BYTES (the 1 MiB default refused every row over 1 MiB)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from api.uploads.jsonrows import changed_line
from gradacc.errors import InvalidRequest

T = TypeVar("T")
BLOCK_BYTES = 256 * 1024
MAX_BLOCK_BYTES = 64 * 1024**2
_CHANGED = re.compile(
    r"Column\(/(?P<column>[^)]+)\) changed from (?P<a>\w+) to (?P<b>\w+) in row (?P<row>\d+)"
)


def with_growing_blocks(read: Callable[[int], T]) -> T:
    """``read(block_bytes)``, again from the start with larger blocks while a row straddles."""
    block = BLOCK_BYTES
    while True:
        try:
            return read(block)
        except pa.ArrowInvalid as exc:
            if "straddl" not in str(exc) or block >= MAX_BLOCK_BYTES:
                raise
            block *= 16


def open_csv(source: pa.NativeFile | Path, block: int, columns: list[str] | None = None) -> Any:
    convert = pa_csv.ConvertOptions(include_columns=columns) if columns else None
    return pa_csv.open_csv(
        source, pa_csv.ReadOptions(use_threads=False, block_size=block), convert_options=convert
    )


def open_jsonl(source: pa.NativeFile | Path, block: int) -> Any:
    return pa_json.open_json(source, pa_json.ReadOptions(use_threads=False, block_size=block))


def batches(path: Path, fmt: str, block: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """A CSV's or JSON lines' record batches (``columns`` only, for a CSV)."""
    reader = open_csv(path, block, columns) if fmt == "csv" else open_jsonl(path, block)
    yield from reader


def type_change(exc: Exception, *, param: str, path: Path) -> InvalidRequest | None:
    """JSON lines whose column changes type (a label that is a number, then text): the reader's
    own words, as a refusal that names the 1-based line (found again in Python: pyarrow's row
    counts from 0 within a block and skips blank lines)."""
    changed = _CHANGED.search(str(exc))
    if changed is None:
        return None
    column = changed["column"]
    line = None if "/" in column else changed_line(path, column)
    where = f"line {line}" if line is not None else f"row {int(changed['row']) + 1}"
    return InvalidRequest(
        f"{where} of column {column!r} mixes {changed['b']} into {changed['a']} values: use "
        "one or the other",
        param=param,
    )
