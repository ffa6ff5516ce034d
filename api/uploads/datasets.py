"""What an uploaded dataset holds, checked where it arrives rather than hours later in a worker:
the format its columns suggest (``trainer_core.spec.chat``), each conversation's or
prompt-completion row's shape, and a label column without empty cells or a mix of numbers and
text. A refusal is a 422 listing up to 20 problems by 1-based line (row) and field, then how
many more were found; the caller keeps nothing of a refused file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pa_parquet

from api.uploads.arrow import BLOCK_BYTES, batches, open_csv, type_change, with_growing_blocks
from api.uploads.jsonrows import (
    MAX_COLUMNS,
    array_rows,
    json_lines,
    line_of_row,
    starts_array,
)
from gradacc.errors import InvalidRequest
from trainer_core.spec.chat import (
    MAX_PROBLEMS,
    IncompletePairs,
    ResolvedFormat,
    prompt_completion_problems,
    resolve_format,
    row_problems,
)
from trainer_core.spec.dpo import OPENAI_COLUMNS, check_preference_row
from trainer_core.spec.prompts import prompt_problems

BATCH_ROWS = 10_000
FALLBACK_MAX_BYTES = 64 * 1024**2  # a refused JSON file read again as Python rows, for its lines
_NUMBER = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"


def found_format(columns: list[str]) -> ResolvedFormat | None:
    """What the columns suggest under the default column names (a job may name others); pairs
    without a side are refused here, naming it, rather than kept as text nobody can train."""
    try:
        fmt = resolve_format(
            columns,
            "auto",
            messages_column="messages",
            prompt_column="prompt",
            completion_column="completion",
        )
    except IncompletePairs as exc:
        raise InvalidRequest(f"{exc} (its columns: {', '.join(columns)})", param="file") from None
    return None if fmt == "text" and "text" not in columns else fmt


def lines_format(path: Path, fmt: str) -> ResolvedFormat | None:
    """The format the keys of JSON rows suggest, read as Python (for files pyarrow refused, to
    say more than its refusal does): not past FALLBACK_MAX_BYTES, where the refusal stands."""
    if fmt not in ("jsonl", "json") or path.stat().st_size > FALLBACK_MAX_BYTES:
        return None
    keys: set[str] = set()
    try:
        for _, row in _rows(path, fmt, []):
            keys.update(row)
            if len(keys) > MAX_COLUMNS:
                return None
    except ValueError:  # not JSON at all: the reader's refusal stands
        return None
    return found_format(sorted(keys))


def schema_mix_in_tools(refusal: InvalidRequest) -> bool:
    """pyarrow's refusal is a value inside a row's ``tools`` that changes kind (the JSON
    Schemas of ``parameters`` are free-form: a default that is a number here, text there). The
    core reads such rows as JSON (``datasets``' ``Json`` feature), so they are not refused."""
    return "of column 'tools/" in refusal.message


def lines_details(path: Path, fmt: str) -> dict[str, Any]:
    """``inspect_dataset``'s details of JSON rows read as Python (after ``lines_format`` found
    them readable): rows, and columns in the order they first appear."""
    columns: dict[str, None] = {}
    rows = 0
    for _, row in _rows(path, fmt, []):
        rows += 1
        columns.update(dict.fromkeys(row))
    return {"format": fmt, "rows": rows, "columns": list(columns)}


def _rows(
    path: Path, fmt: str, columns: list[str], block: int = BLOCK_BYTES
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line or row, the row's values of ``columns``), one row in memory at a time."""
    if fmt in ("jsonl", "json"):
        yield from array_rows(path) if fmt == "json" and starts_array(path) else json_lines(path)
        return
    read: Iterator[pa.RecordBatch]
    if fmt == "parquet":
        read = pa_parquet.ParquetFile(path).iter_batches(BATCH_ROWS, columns=columns)
    else:
        read = batches(path, "csv", block, columns)
    number = 0
    for batch in read:
        for row in batch.to_pylist():
            number += 1
            yield number, row


ROW_FIELDS = ("tools", "parallel_tool_calls")  # a conversation row's own, besides messages


def check_rows(
    path: Path, fmt: str, found: ResolvedFormat | None, present: Sequence[str] = ()
) -> dict[str, Any]:
    """Every conversation, prompt-completion or preference row has the shape its format needs.
    Returns what the file's details record of its rows: the function calling that
    conversations use (``function_calling``: "tools", "tool_calls") and, when every row ends
    with a user turn, ``prompts`` (a prompt file for method grpo) and ``untrained_rows`` (rows
    with no assistant message to train, which only grpo takes). ``present``: the file's
    columns, for the readers that read only some."""
    if found == "preference":
        _check_pairs(path, fmt)
        return {}
    where = "line" if fmt in ("jsonl", "json") else "row"
    facts: dict[str, Any] = {}
    if found == "messages":
        columns = ["messages", *(c for c in ROW_FIELDS if c in present)]

        def scan(block: int) -> list[str]:
            facts.clear()  # a scan again with larger blocks sees every row again
            return _scan_conversations(_rows(path, fmt, columns, block), where, facts)
    elif found == "prompt-completion":

        def scan(block: int) -> list[str]:
            return [
                f"{where} {number}: {problem}"
                for number, row in _rows(path, fmt, ["prompt", "completion"], block)
                for problem in prompt_completion_problems(row, "prompt", "completion")
            ]
    else:
        return {}
    problems = with_growing_blocks(scan)
    if problems:
        shown = problems[:MAX_PROBLEMS]
        raise InvalidRequest(
            problem_summary(len(problems), shown, found), param="file", errors=shown
        )
    return facts


def _scan_conversations(
    rows: Iterator[tuple[int, dict[str, Any]]], where: str, facts: dict[str, Any]
) -> list[str]:
    """Each row a conversation to train, or a prompt (``prompt_problems``). A prompt with no
    assistant message to train passes only in a file whose rows are all prompts."""
    calling: set[str] = set()
    problems: list[str] = []
    untrained: list[str] = []  # prompts' problems as conversations: theirs if not a prompt file
    all_prompts = True
    for number, row in rows:
        calling.update(_function_calling(row))
        found = [f"{where} {number}: {problem}" for problem in row_problems(row)]
        prompt = not prompt_problems(row)
        all_prompts = all_prompts and prompt
        (untrained if prompt and found else problems).extend(found)
    problems += [] if all_prompts else untrained
    if all_prompts and not problems:
        facts.update(prompts=True, untrained_rows=len(untrained))
    if calling:
        facts["function_calling"] = sorted(calling)
    return problems


def _function_calling(row: dict[str, Any]) -> list[str]:
    messages = row.get("messages")
    calls = isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("tool_calls") for m in messages
    )
    return ["tools"] * bool(row.get("tools")) + ["tool_calls"] * calls


def _check_pairs(path: Path, fmt: str) -> None:
    """Preference rows, OpenAI's or TRL's, by ``check_preference_row`` (the core's own check),
    which names the line and the field; all columns are read (a row's shape picks its checks)."""
    where = "line" if fmt in ("jsonl", "json") else "row"

    def scan(block: int) -> list[str]:
        problems: list[str] = []
        for number, row in _rows(path, fmt, _preference_columns(path, fmt, block), block):
            found = check_preference_row(row, number)
            problems += found if where == "line" else [f"row{p[4:]}" for p in found]
        return problems

    problems = with_growing_blocks(scan)
    if problems:
        shown = problems[:MAX_PROBLEMS]
        summary = problem_summary(len(problems), shown, "preference")
        raise InvalidRequest(summary, param="file", errors=shown)


def _preference_columns(path: Path, fmt: str, block: int) -> list[str]:
    """The preference columns a CSV or Parquet file has (JSON rows are read whole)."""
    if fmt == "parquet":
        names = list(pa_parquet.ParquetFile(path).schema_arrow.names)
    elif fmt == "csv":
        names = list(open_csv(path, block).schema.names)  # the header only
    else:
        return []
    return [name for name in (*OPENAI_COLUMNS, "prompt", "chosen", "rejected") if name in names]


def problem_summary(total: int, shown: list[str], found: str) -> str:
    """The refusal's message, in good English ("1 problem in this messages file: …"); past
    MAX_PROBLEMS, the listed ones, then how many more were found ("30 problems …: <20 listed>;
    and 10 more not listed")."""
    noun = "problem" if total == 1 else "problems"
    rest = total - len(shown)
    more = f"; and {rest} more not listed" if rest > 0 else ""
    return f"{total} {noun} in this {found} file: " + "; ".join(shown) + more


def _label_columns(path: Path, fmt: str, column: str, block: int) -> Iterator[pa.Array]:
    if fmt == "parquet":
        for batch in pa_parquet.ParquetFile(path).iter_batches(BATCH_ROWS, columns=[column]):
            yield batch.column(0)
        return
    if fmt == "json" and starts_array(path):  # one array of objects, streamed
        values: list[Any] = []
        for _, row in array_rows(path):
            values.append(row.get(column))
            if len(values) == BATCH_ROWS:
                yield pa.array(values)
                values = []
        if values:
            yield pa.array(values)
        return
    for batch in batches(path, "csv" if fmt == "csv" else "jsonl", block, [column]):
        yield batch.column(batch.schema.get_field_index(column))


def check_labels(path: Path, fmt: str, column: str, *, param: str) -> None:
    """No empty label, and labels all numbers or all text, else a 422 naming the first row at
    fault (1-based; a CSV's header is not a row)."""
    try:
        with_growing_blocks(lambda block: _scan_labels(path, fmt, column, block, param))
    except pa.ArrowInvalid as exc:
        refusal = type_change(exc, param=param, path=path)
        if refusal is None:
            raise
        raise refusal from exc


def _where(path: Path, fmt: str, row: int) -> str:
    """A 1-based row as the user counts it: a line of JSON lines, else a row (of a CSV without
    its header, of a JSON array, of a Parquet file)."""
    if fmt == "jsonl" or (fmt == "json" and not starts_array(path)):
        return f"line {line_of_row(path, row)}"
    return f"row {row}"


def _scan_labels(path: Path, fmt: str, column: str, block: int, param: str) -> None:
    seen = 0
    numeric: bool | None = None  # the first row's kind; every later row must be the same
    for values in _label_columns(path, fmt, column, block):
        text = pc.cast(values, pa.string())
        empty = pc.fill_null(pc.or_kleene(pc.is_null(values), pc.equal(text, "")), True)
        if pc.any(empty).as_py():
            where = _where(path, fmt, seen + pc.index(empty, True).as_py() + 1)
            raise InvalidRequest(f"{where} of column {column!r} is empty", param=param)
        numbers = pc.match_substring_regex(text, _NUMBER)
        if numeric is None and len(numbers):
            numeric = bool(numbers[0].as_py())
        odd = pc.index(numbers, not numeric).as_py()
        if odd >= 0:
            kind, kinds = ("text", "numbers") if numeric else ("a number", "text")
            raise InvalidRequest(
                f"{_where(path, fmt, seen + odd + 1)} of column {column!r} mixes {kind} into "
                f"{kinds} labels: use one or the other",
                param=param,
            )
        seen += len(values)
