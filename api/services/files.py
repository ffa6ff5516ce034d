"""Use cases of /v1/files: store an upload, list, read, delete. Keyword-only, one commit each.

A file is made in a staging folder (``files/.staging-<id>``), checked there, renamed into place
and only then committed; any failure removes what was made, so a refused or interrupted upload
leaves neither a row nor bytes behind.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from api.uploads.archives import unpack_model
from api.uploads.datasets import (
    check_labels,
    check_rows,
    found_format,
    lines_details,
    lines_format,
    schema_mix_in_tools,
)
from api.uploads.formats import archive_format, dataset_format, inspect_dataset
from api.uploads.receive import PARTS, Upload, receive_upload
from gradacc.errors import FileInUse, FileNotFound, InvalidRequest, StorageQuotaExceeded
from gradacc.jobs.states import lock_tenant
from gradacc.settings import Settings
from gradacc.sources.files import MODEL_DIR, file_dir, is_file_id, jobs_using, new_file_id
from gradacc.tables import File, FilePurpose, Job


def upload_folder(settings: Settings) -> Path:
    """Where uploads stream to: under ``files/``, so that keeping one is a rename."""
    return settings.files_dir / ".uploads"


STALE_AFTER_S = 3600.0  # an upload in progress writes every MiB; one this quiet was abandoned


def sweep_leftovers(settings: Settings, *, older_than_s: float = STALE_AFTER_S) -> int:
    """Remove the partial uploads and staging folders that an API process killed mid-upload left
    behind (a live process removes its own on any failure); returns how many it removed."""
    cutoff = time.time() - older_than_s
    found = [*upload_folder(settings).glob(".upload-*"), *settings.files_dir.glob(".staging-*")]
    removed = 0
    for path in found:
        try:
            if path.lstat().st_mtime >= cutoff:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue  # another API process swept it first
        removed += 1
    return removed


def create_file(
    session: Session,
    *,
    settings: Settings,
    tenant: str,
    upload: Upload,
    noted: dict[str, Any] | None = None,
) -> File:
    """Check the upload for its purpose, move it into place and record it; ``noted``: details
    the caller adds to what checking found (an import's report)."""
    file_id = new_file_id()
    staging = settings.files_dir / f".staging-{file_id}"
    final = file_dir(settings, file_id)
    try:
        purpose = _purpose(upload.fields.get("purpose", FilePurpose.DATASET))
        staging.mkdir(parents=True)
        stored_name, details = _store(settings, staging, upload, purpose)
        details |= noted or {}
        lock_tenant(session, tenant=tenant)  # until commit: two uploads cannot both fit
        adding = upload.bytes + details.get("unpacked_bytes", 0)
        check_storage(session, settings=settings, tenant=tenant, adding=adding)
        os.replace(staging, final)
        file = File(
            id=file_id,
            tenant=tenant,
            purpose=purpose,
            filename=upload.filename,
            stored_name=stored_name,
            bytes=upload.bytes,
            sha256=upload.sha256,
            details=details,
        )
        session.add(file)
        session.commit()
    except BaseException:
        upload.path.unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        raise
    return file


def check_storage(session: Session, *, settings: Settings, tenant: str, adding: int) -> None:
    """413 when ``adding`` bytes would take the tenant past its storage quota: its files as
    stored (an upload, a model's unpacked folder) and its jobs' outputs as recorded."""
    limit = settings.max_storage_bytes_per_tenant
    if not limit:
        return
    used = session.scalar(
        select(func.coalesce(func.sum(File.bytes), 0)).where(File.tenant == tenant)
    )
    models = select(File.details).where(File.tenant == tenant, File.purpose == FilePurpose.MODEL)
    used = (used or 0) + sum(d.get("unpacked_bytes", 0) for d in session.scalars(models))
    outputs = select(Job.outputs).where(Job.tenant == tenant, Job.outputs.is_not(None))
    used += sum(sum(o.values()) for o in session.scalars(outputs) if o)
    if used + adding > limit:
        raise StorageQuotaExceeded(used=used, adding=adding, limit=limit)


async def receive_within_quota(
    request: Request,
    session: Session,
    *,
    settings: Settings,
    tenant: str,
    parts: tuple[str, ...] = PARTS,
) -> Upload:
    """An upload's parts, its file on disk; a tenant already at its storage quota is refused
    before the body is read (``POST /v1/files``, ``POST /v1/files/import``)."""
    await run_in_threadpool(check_storage, session, settings=settings, tenant=tenant, adding=0)
    return await receive_upload(request, folder=upload_folder(settings), parts=parts)


UPLOADABLE = (
    FilePurpose.DATASET,
    FilePurpose.MODEL,
    FilePurpose.FINE_TUNE,
    FilePurpose.BATCH,
    FilePurpose.EVALS,
)
WRITTEN = {
    FilePurpose.FINE_TUNE_RESULTS: "fine-tune-results files are written by fine-tuning jobs",
    FilePurpose.BATCH_OUTPUT: "batch_output files are written by batches",
}
MAX_BATCH_LINES = 50_000  # OpenAI's limit on a batch's requests


def _purpose(value: str) -> FilePurpose:
    if value in WRITTEN:
        raise InvalidRequest(f"{WRITTEN[FilePurpose(value)]}, not uploaded", param="purpose")
    if value not in UPLOADABLE:
        choices = ", ".join(UPLOADABLE)
        raise InvalidRequest(f"{value!r} is not one of {choices}", param="purpose")
    return FilePurpose(value)


def _jsonl_only(filename: str) -> None:
    """OpenAI takes JSON lines only for fine-tune; CSV, JSON and Parquet are purpose=dataset."""
    suffix = Path(filename).suffix.lower()
    if suffix != ".jsonl":
        got = repr(suffix[:16]) if suffix else "no suffix"
        raise InvalidRequest(
            f"a fine-tune file is JSONL: a .jsonl file, one JSON object a line (got {got}); "
            "upload CSV, JSON or Parquet with purpose=dataset",
            param="file",
        )


def _store(
    settings: Settings, staging: Path, upload: Upload, purpose: FilePurpose
) -> tuple[str, dict[str, Any]]:
    """(the upload's name on disk, what checking it found)."""
    if purpose in (FilePurpose.BATCH, FilePurpose.EVALS):
        return _lines_input(staging, upload, purpose)
    if purpose in (FilePurpose.DATASET, FilePurpose.FINE_TUNE):
        if purpose == FilePurpose.FINE_TUNE:
            _jsonl_only(upload.filename)
        fmt = dataset_format(upload.filename)
        # The core picks the reader by suffix; "jsonl" is read by the json reader.
        stored_name = f"data{Path(upload.filename).suffix.lower()}"
        os.replace(upload.path, staging / stored_name)
        details = check_dataset(staging / stored_name, fmt)
        if purpose == FilePurpose.FINE_TUNE and details["dataset_format"] not in CHAT_FORMATS:
            raise InvalidRequest(
                "a fine-tune file holds chat, instruction or preference rows: a JSON line each "
                "with 'messages' (or 'prompt' and 'completion'; or 'input', 'preferred_output' "
                f"and 'non_preferred_output'); its columns: {details['columns']}",
                param="file",
            )
        return stored_name, details
    fmt = archive_format(upload.filename)
    stored_name = f"model.{fmt}"
    os.replace(upload.path, staging / stored_name)
    details = unpack_model(
        staging / stored_name,
        fmt,
        staging / MODEL_DIR,
        max_bytes=settings.max_model_unpacked_bytes,
        max_files=settings.max_model_files,
    )
    return stored_name, details


def _lines_input(staging: Path, upload: Upload, purpose: FilePurpose) -> tuple[str, dict[str, Any]]:
    """A batch's requests or an eval's items: JSON lines, counted. A batch's lines are checked
    when it runs (a bad line goes to its error file; the others are answered); an eval's when a
    run names the file (against the eval's item schema)."""
    if Path(upload.filename).suffix.lower() != ".jsonl":
        raise InvalidRequest(
            f"a {purpose} file is JSONL: a .jsonl file, one JSON object a line", param="file"
        )
    os.replace(upload.path, staging / "data.jsonl")
    lines = 0
    with (staging / "data.jsonl").open("rb") as read:
        for raw in read:
            lines += bool(raw.strip())
    if not 0 < lines <= MAX_BATCH_LINES:
        raise InvalidRequest(
            f"a {purpose} file holds 1 to {MAX_BATCH_LINES} lines (this file: {lines})",
            param="file",
        )
    return "data.jsonl", {"lines": lines}


def check_dataset(path: Path, fmt: str) -> dict[str, Any]:
    """Readable, its rows in the shape its format needs, its default label column clean; what
    it holds (format, rows, columns, the dataset format its columns suggest)."""
    try:
        details = inspect_dataset(path, fmt)
    except InvalidRequest as refusal:
        # JSON lines that pyarrow cannot read as one table (a line that is no object, a field
        # that changes type) may still be chat rows: then their problems say more, line by line
        # (up to FALLBACK_MAX_BYTES: past it, lines_format reads nothing and the refusal stands).
        found = lines_format(path, fmt)
        facts = check_rows(path, fmt, found)
        if found != "messages" or not schema_mix_in_tools(refusal):
            raise
        details = lines_details(path, fmt)  # good conversations whose tools' schemas vary
    else:
        found = found_format(details["columns"])
        facts = check_rows(path, fmt, found, details["columns"])
        if "label" in details["columns"] and found in (None, "text"):
            check_labels(path, fmt, "label", param="file")
    # The function calling its conversations use (a job checks that its chat template reads
    # it), and whether its rows are prompts (for method grpo).
    return details | {"dataset_format": found} | facts


CHAT_FORMATS = ("messages", "prompt-completion", "preference")


def get_file(session: Session, *, file_id: str, tenant: str) -> File:
    """Another tenant's file does not exist, as far as this tenant can tell (404)."""
    file = session.get(File, file_id) if is_file_id(file_id) else None
    if file is None or file.tenant != tenant:
        raise FileNotFound(file_id)
    return file


def list_files(
    session: Session,
    *,
    tenant: str,
    limit: int,
    after: str | None,
    purpose: FilePurpose | None = None,
) -> tuple[list[File], bool]:
    """Newest first; keyset pagination on the time-ordered id. Returns (page, has_more)."""
    query = select(File).where(File.tenant == tenant).order_by(File.id.desc()).limit(limit + 1)
    if purpose is not None:
        query = query.where(File.purpose == purpose)
    if after is not None:
        query = query.where(File.id < after)
    files = list(session.scalars(query))
    return files[:limit], len(files) > limit


def content_path(settings: Settings, file: File) -> Path:
    return file_dir(settings, file.id) / file.stored_name


def delete_file(session: Session, *, settings: Settings, file_id: str, tenant: str) -> None:
    """409 while a queued or running job names it. The row goes first: a crash between the two
    leaves unreferenced bytes, never a row whose bytes are gone."""
    file = get_file(session, file_id=file_id, tenant=tenant)
    lock_tenant(session, tenant=tenant)  # no job naming it can be created meanwhile
    users = jobs_using(session, file_id=file_id, tenant=tenant)
    if users:
        raise FileInUse(file_id, users)
    session.delete(file)
    session.commit()
    shutil.rmtree(file_dir(settings, file_id), ignore_errors=True)
