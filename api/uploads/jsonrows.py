"""Rows of an uploaded JSON file as Python values, one at a time, in bounded memory.

``json.loads`` of a whole upload holds ~30 times its size in objects; nothing here does. JSON lines
are read with a bounded ``readline``; a JSON array is read as a stream of parser events (``ijson``)
and built one row at a time. A row is at most MAX_ROW_BYTES long (a string inside it too: the
reader stops feeding the parser) and MAX_DEPTH deep; an array at most MAX_ARRAY_BYTES and
MAX_ARRAY_ROWS long, its rows at most MAX_COLUMNS distinct keys. Over a bound is a 422 that names
the line or row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import IO, Any, NoReturn

import ijson

from gradacc.errors import InvalidRequest

Row = dict[str, Any]
MAX_ROW_BYTES = 8 * 1024**2
MAX_DEPTH = 64  # a conversation is 4 deep
MAX_ARRAY_BYTES = 256 * 1024**2  # larger: JSON lines, which need no parse of the whole
MAX_ARRAY_ROWS = 10_000_000
MAX_COLUMNS = 10_000
READ_BYTES = 64 * 1024


def _refuse(message: str) -> NoReturn:
    raise InvalidRequest(message, param="file")


def starts_array(path: Path) -> bool:
    with path.open("rb") as source:
        return source.read(64).lstrip()[:1] == b"["


def json_lines(path: Path) -> Iterator[tuple[int, Row]]:
    """(1-based line, its object; ``{}`` for a line that is JSON but no object). A line that is
    not JSON raises ValueError."""
    with path.open("rb") as lines:
        for number in count(1):
            line = lines.readline(MAX_ROW_BYTES + 1)
            if not line:
                return
            if len(line) > MAX_ROW_BYTES:
                _refuse(f"line {number} is over {MAX_ROW_BYTES} bytes")
            if line.strip():
                try:
                    row = json.loads(line)
                except RecursionError:
                    raise ValueError(f"line {number} is nested too deeply") from None
                except json.JSONDecodeError as exc:
                    where = f"column {exc.colno}: {exc.msg}"
                    raise ValueError(f"line {number} is not valid JSON (at {where})") from None
                yield number, row if isinstance(row, dict) else {}


def first_bad_line(path: Path) -> str | None:
    """What is wrong with the first line of JSON lines that is not JSON, naming it (1-based, as
    every other check counts): pyarrow's own refusal counts rows from 0 and skips blank lines."""
    try:
        for _ in json_lines(path):
            pass
    except (ValueError, UnicodeDecodeError) as exc:
        return str(exc)
    return None


def _kind(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object" if isinstance(value, dict) else "other"


def changed_line(path: Path, column: str) -> int | None:
    """The 1-based line of JSON lines where ``column`` first holds another kind of value than
    on its first line that has one (pyarrow names a row counted from 0 within its block)."""
    first: str | None = None
    try:
        for number, row in json_lines(path):
            kind = _kind(row.get(column))
            if first is None:
                first = kind
            elif kind is not None and kind != first:
                return number
    except ValueError:
        return None
    return None


def line_of_row(path: Path, row: int) -> int:
    """The 1-based line of JSON lines' ``row``-th row (1-based; blank lines are not rows)."""
    for seen, (number, _) in enumerate(json_lines(path), 1):
        if seen == row:
            return number
    return row


class _Source:
    """The file as the parser reads it: it stops feeding the parser inside an over-long row."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.position, self.row, self.row_start = raw, 0, 0, -1

    def read(self, size: int) -> bytes:
        if self.row_start >= 0 and self.position - self.row_start > MAX_ROW_BYTES:
            _refuse(f"row {self.row} of the array is over {MAX_ROW_BYTES} bytes")
        data = self.raw.read(size)
        self.position += len(data)
        return data


def array_rows(path: Path) -> Iterator[tuple[int, Row]]:
    """(1-based row, its object) of a file that is one JSON array of objects."""
    size = path.stat().st_size
    if size > MAX_ARRAY_BYTES:
        _refuse(f"a JSON array of {size} bytes (at most {MAX_ARRAY_BYTES}): send JSON lines")
    with path.open("rb") as raw:
        source = _Source(raw)
        try:
            yield from _objects(source)
        except ijson.JSONError as exc:
            raise ValueError(f"not valid JSON after byte {source.position}: {exc}") from None


def _objects(source: _Source) -> Iterator[tuple[int, Row]]:
    depth, builder = 0, ijson.ObjectBuilder()
    events = ijson.basic_parse(source, use_float=True, buf_size=READ_BYTES)
    for event, value in events:
        if depth == 0 and event != "start_array":
            raise ValueError("a .json dataset is JSON lines or one array of objects")
        if depth == 1 and event == "start_map":
            source.row, source.row_start = source.row + 1, source.position
            if source.row > MAX_ARRAY_ROWS:
                _refuse(f"the array holds over {MAX_ARRAY_ROWS} rows: send JSON lines")
            builder = ijson.ObjectBuilder()
        elif depth == 1 and event != "end_array":
            raise ValueError(f"row {source.row + 1} of the array is not an object")
        if event in ("start_map", "start_array"):
            depth += 1
            if depth > MAX_DEPTH:
                _refuse(f"row {source.row} of the array is nested over {MAX_DEPTH} deep")
        elif event in ("end_map", "end_array"):
            depth -= 1
        if depth >= 1 and source.row_start >= 0:
            builder.event(event, value)
        if depth == 1 and event == "end_map":
            yield source.row, builder.value
            source.row_start = -1


def array_shape(path: Path) -> tuple[int, list[str]]:
    """(rows, columns in the order first seen) of one JSON array of objects."""
    rows, columns = 0, dict[str, None]()
    for rows, row in array_rows(path):
        columns.update(dict.fromkeys(row))
        if len(columns) > MAX_COLUMNS:
            _refuse(f"the rows have over {MAX_COLUMNS} distinct keys (at row {rows})")
    return rows, list(columns)
