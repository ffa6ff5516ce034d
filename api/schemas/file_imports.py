"""The answer of POST /v1/files/import: the file stored (``FileRead``, as /v1/files answers) and
the lines that did not become rows, each with why."""

from __future__ import annotations

from pydantic import BaseModel, Field

from api.schemas.jobs import FileRead
from gradacc.openai.imports import KEPT_REFUSALS, ImportReport
from gradacc.tables import File


class RefusedLine(BaseModel):
    line: int = Field(description="The line of the uploaded file, counted from 1")
    reason: str = Field(description="The field at fault and why, as the trainer's checks say it")


class FileImportRead(FileRead):
    refused_rows: int = Field(description="How many lines did not become rows")
    refused: list[RefusedLine] = Field(
        description=f"The first {KEPT_REFUSALS} of them, by line (details.import keeps the "
        "first 20 with the file, beside what was read: format, lines, rows, forms, models)"
    )

    @classmethod
    def of_import(cls, file: File, report: ImportReport) -> FileImportRead:
        refused = [RefusedLine(line=n, reason=r) for n, r in report.refused]
        return cls(**dict(FileRead.of(file)), refused_rows=report.refused_rows, refused=refused)
