"""POST /v1/files/import: another service's data made a training file of the tenant's in one call.

The conversion is the kernel's (``gradacc.openai.imports``): the upload is read once, line by
line, into a second temporary file beside it; that file is then stored by ``files.create_file``,
so its checks, storage quota and tenancy are every upload's. Both temporary files are removed
whatever happens (a killed process leaves them to ``files.sweep_leftovers``: same names).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from api.services.files import create_file
from api.uploads.receive import Upload
from gradacc.errors import InvalidRequest
from gradacc.openai.imports import ImportReport, import_lines
from gradacc.settings import Settings
from gradacc.tables import File, FilePurpose

IMPORT_PARTS = ("file", "format", "bad_rows")
BAD_ROWS = ("skip", "refuse")  # skip: import the good rows and name the others; refuse: all or none
LISTED = 20  # refusals a 400's message and a file's details list


def import_file(
    session: Session, *, settings: Settings, tenant: str, upload: Upload
) -> tuple[File, ImportReport]:
    """Convert the upload, refuse it if no row (or, with ``bad_rows`` refuse, not every row)
    converts, and store what it made as a fine-tune file (a dataset file for text rows)."""
    converted = upload.path.with_name(f".upload-{secrets.token_hex(8)}")
    try:
        bad_rows = upload.fields.get("bad_rows", "skip")
        if bad_rows not in BAD_ROWS:
            raise InvalidRequest(f"{bad_rows[:40]!r} is not skip or refuse", param="bad_rows")
        with upload.path.open("rb") as source, converted.open("xb") as out:
            report = import_lines(source, out, upload.fields.get("format", "auto"))
        _check(report, refuse_any=bad_rows == "refuse")
        purpose = FilePurpose.DATASET if report.kind == "text" else FilePurpose.FINE_TUNE
        name = f"{Path(upload.filename).stem}.jsonl"
        stored = Upload(converted, name, report.bytes, report.sha256, {"purpose": purpose})
        file = create_file(
            session, settings=settings, tenant=tenant, upload=stored, noted=_noted(upload, report)
        )
    finally:
        upload.path.unlink(missing_ok=True)
        converted.unlink(missing_ok=True)
    return file, report


def _check(report: ImportReport, *, refuse_any: bool) -> None:
    """400 naming the lines: nothing usable, or (``refuse_any``) anything refused."""
    if report.rows and not (refuse_any and report.refused_rows):
        return
    listed = [f"line {line}: {reason}" for line, reason in report.refused[:LISTED]]
    more = report.refused_rows - len(listed)
    shown = "; ".join(listed) + (f"; and {more} more" if more > 0 else "")
    if not report.rows:
        lead = f"no row of this file can be imported ({report.lines} lines read)"
    else:
        lead = f"{report.refused_rows} of {report.lines} rows refused, and bad_rows is refuse"
    raise InvalidRequest(f"{lead}: {shown or 'the file is empty'}", param="file", errors=listed)


def _noted(upload: Upload, report: ImportReport) -> dict[str, Any]:
    """What the file's details keep of the import: the report (the first refusals) and the
    source as uploaded."""
    source = {"filename": upload.filename, "bytes": upload.bytes, "sha256": upload.sha256}
    return {"import": report.summary(kept=LISTED) | {"source": source}}
