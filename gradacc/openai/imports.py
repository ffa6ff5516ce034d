"""A training file made from another service's data, in one pass: JSON lines in, JSON lines out,
each refused line named with why.

Each line is read by its shape (``format`` "auto") or as the one format given: OpenAI's stored
chat completions (``import_stored``), OpenAI's fine-tuning rows or Together's (``import_rows``).
A file trains one kind of row (chat, prompt-completion, preference or text); the first line that
converts sets it, and a later row of another kind is refused naming the kind. Pure: streams in,
a report out; the API stores the file (``api.services.file_imports``).

Example:
    >>> import io
    >>> out = io.BytesIO()
    >>> lines = b'{"prompt": "2+2=", "completion": "4"}\\n{"prompt": 1, "completion": "2"}\\n'
    >>> report = import_lines(io.BytesIO(lines), out, "auto")
    >>> report.rows, report.refused
    (1, [(2, 'prompt: a string')])
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal, get_args

from gradacc.errors import InvalidRequest
from gradacc.openai.import_rows import (
    Converted,
    Form,
    Refused,
    RowKind,
    Rules,
    fine_tuning_row,
    form_of,
)
from gradacc.openai.import_stored import stored_completion_row

ImportFormat = Literal["auto", "stored-completions", "openai", "together"]
IMPORT_FORMATS: tuple[str, ...] = get_args(ImportFormat)
# The forms each format reads (a line of another is refused, naming what it is).
FORMS: dict[str, tuple[Form, ...]] = {
    "auto": get_args(Form),
    "stored-completions": ("stored-completions",),
    "openai": ("messages", "preference", "prompt-completion"),
    "together": ("messages", "preference", "prompt-completion", "text"),
}
RULES: dict[str, Rules] = {"openai": "openai", "together": "together"}  # auto: by the row
MAX_LINE_BYTES = 8 * 1024**2  # as an upload's row (api.uploads.jsonrows)
KEPT_REFUSALS = 100  # the first ones, by line; all are counted
CHUNK = 1 << 20
KIND_NAMES = {
    "messages": "chat (messages)",
    "prompt-completion": "prompt-completion",
    "preference": "preference",
    "text": "text",
}


@dataclass
class ImportReport:
    """What one import read and wrote: the output's size and sha256, its rows and their kind,
    how many of each form, the models that answered (stored completions) and the refusals."""

    format: str
    lines: int = 0  # non-blank lines read
    rows: int = 0  # rows written
    kind: RowKind | None = None
    kind_line: int = 0  # the line that set the kind
    forms: Counter[str] = field(default_factory=Counter)
    models: Counter[str] = field(default_factory=Counter)
    refused_rows: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)  # the first KEPT_REFUSALS
    bytes: int = 0
    sha256: str = ""

    def refuse(self, line: int, reason: str) -> None:
        self.refused_rows += 1
        if len(self.refused) < KEPT_REFUSALS:
            self.refused.append((line, reason))

    def summary(self, kept: int = KEPT_REFUSALS) -> dict[str, Any]:
        """The report as JSON values (a file's details keep it with fewer refusals listed)."""
        return {
            "format": self.format,
            "lines": self.lines,
            "rows": self.rows,
            "kind": self.kind,
            "forms": dict(self.forms),
            "models": dict(self.models.most_common(20)),
            "refused_rows": self.refused_rows,
            "refused": [{"line": n, "reason": r} for n, r in self.refused[:kept]],
        }


def import_lines(source: IO[bytes], out: IO[bytes], fmt: str) -> ImportReport:
    """Convert ``source``'s JSON lines into ``out`` (``fmt``: one of ``IMPORT_FORMATS``)."""
    if fmt not in IMPORT_FORMATS:
        choices = ", ".join(IMPORT_FORMATS)
        raise InvalidRequest(f"{fmt[:40]!r} is not one of {choices}", param="format")
    report = ImportReport(fmt)
    digest = hashlib.sha256()
    for number, raw in _lines(source):
        report.lines += 1
        try:
            converted = _convert(raw, fmt)
            _same_kind(report, converted.kind)
        except Refused as refusal:
            report.refuse(number, str(refusal))
            continue
        if report.kind is None:
            report.kind, report.kind_line = converted.kind, number
        data = (json.dumps(converted.row, ensure_ascii=False) + "\n").encode()
        out.write(data)
        digest.update(data)
        report.bytes += len(data)
        report.rows += 1
        report.forms[converted.form] += 1
        if converted.model:
            report.models[converted.model] += 1
    report.sha256 = digest.hexdigest()
    return report


def _same_kind(report: ImportReport, kind: RowKind) -> None:
    if report.kind is not None and kind != report.kind:
        raise Refused(
            f"a {KIND_NAMES[kind]} row in a file of {KIND_NAMES[report.kind]} rows (line "
            f"{report.kind_line} set the kind: a file trains one kind of row)"
        )


def _convert(raw: bytes | None, fmt: str) -> Converted:
    if raw is None:
        raise Refused(f"over {MAX_LINE_BYTES} bytes")
    try:
        record = json.loads(raw)
    except RecursionError:
        raise Refused("nested too deeply") from None
    except UnicodeDecodeError:
        raise Refused("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise Refused(f"not valid JSON (at column {exc.colno}: {exc.msg})") from None
    if not isinstance(record, dict):
        raise Refused(f"a JSON object per line (got {type(record).__name__})")
    form = form_of(record)
    if form is None:
        keys = ", ".join(sorted(record)[:8]) or "none"
        raise Refused(
            "no known form: a stored chat completion (choices), messages, input and "
            f"preferred_output, prompt and completion, or text (its keys: {keys})"
        )
    if form not in FORMS[fmt]:
        raise Refused(f"a {form} record, and this import reads {fmt} ({', '.join(FORMS[fmt])})")
    if form == "stored-completions":
        return stored_completion_row(record)
    return fine_tuning_row(record, form, RULES.get(fmt))


def _lines(source: IO[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """(1-based line, its bytes; None for a line over MAX_LINE_BYTES, read past), blank lines
    skipped. A JSON array is refused whole: an import reads JSON lines."""
    number = 0
    while True:
        line = source.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if number == 1 and line.lstrip()[:1] == b"[":
            raise InvalidRequest(
                "an import reads JSON lines, one record a line; this file is a JSON array",
                param="file",
            )
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while (rest := source.readline(CHUNK)) and not rest.endswith(b"\n"):
                pass
            yield number, None
        elif line.strip():
            yield number, line
