"""Uploaded files as jobs use them: ids, where their bytes live, and the spec fields naming them.

A spec may name ``model``, ``dataset`` and ``eval_dataset`` as ``file-…`` ids. The API checks at
POST that each exists, belongs to the tenant and has the right purpose; the training child turns
them into local paths (``resolve_file_sources``) before calling the core, which knows nothing of
the database. The path of a file is a function of its id alone, so the resolved spec, and with it
the checkpoint's fingerprint, is the same on every attempt.

Layout: ``files/<id>/<stored_name>`` is the upload as received (``data.csv``, ``model.tar.gz``…);
a model's archive is unpacked next to it into ``files/<id>/model/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradacc.errors import InvalidRequest
from gradacc.ids import time_ordered_id
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.tables import UNFINISHED_STATUSES, File, FilePurpose, Job
from trainer_core.spec.chat import IncompletePairs, known_template, no_template
from trainer_core.spec.errors import JobError
from trainer_core.spec.fields import (
    BUILTIN_CHAT_MODELS,
    BUILTIN_DATASET_FORMATS,
    BUILTIN_DATASETS,
    BUILTIN_MODELS,
)
from trainer_core.spec.job import JobSpec
from trainer_core.spec.sources import FILE_ID_PATTERN, classify_source
from trainer_core.spec.tools import template_refusal

# spec field -> the purpose of a file it may name
FILE_FIELDS: dict[str, FilePurpose] = {
    "model": FilePurpose.MODEL,
    "dataset": FilePurpose.DATASET,
    "eval_dataset": FilePurpose.DATASET,
}
# what a file of each purpose may be used as
PURPOSES_OF: dict[str, frozenset[FilePurpose]] = {
    FilePurpose.DATASET: frozenset({FilePurpose.DATASET}),
    FilePurpose.FINE_TUNE: frozenset({FilePurpose.DATASET}),  # OpenAI's name for a dataset
    FilePurpose.MODEL: frozenset({FilePurpose.MODEL}),
    FilePurpose.FINE_TUNE_RESULTS: frozenset(),
}
MODEL_DIR = "model"


class FileUnavailable(JobError):
    """A job's file was deleted (or never was) by the time it trains."""

    code = "file_not_found"


def new_file_id() -> str:
    return time_ordered_id("file-")


def is_file_id(value: str) -> bool:
    return re.fullmatch(FILE_ID_PATTERN, value) is not None


def file_dir(settings: Settings, file_id: str) -> Path:
    return settings.files_dir / file_id


def local_source(settings: Settings, file: File) -> Path:
    """What the core loads: the dataset file itself, or a model's unpacked directory."""
    if file.purpose == FilePurpose.MODEL:
        return file_dir(settings, file.id) / MODEL_DIR
    return file_dir(settings, file.id) / file.stored_name


def write_jsonl(
    session: Session,
    settings: Settings,
    *,
    tenant: str,
    name: str,
    records: list[Any],
    purpose: FilePurpose,
    details: dict[str, Any] | None = None,
) -> str:
    """A file of the tenant's written by the server (a batch's output, a distillation's training
    rows), a JSON line a record; its id. The caller commits."""
    file_id = new_file_id()
    folder = file_dir(settings, file_id)
    folder.mkdir(parents=True)
    text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    staged = folder / ".partial"
    staged.write_text(text)
    os.replace(staged, folder / "data.jsonl")
    data = text.encode()
    session.add(
        File(
            id=file_id,
            tenant=tenant,
            purpose=purpose,
            filename=name,
            stored_name="data.jsonl",
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            details=details or {"lines": len(records)},
        )
    )
    return file_id


def file_refs(spec: JobSpec | dict[str, Any]) -> dict[str, str]:
    """Spec field -> file id, for the fields that name an uploaded file."""
    values = spec if isinstance(spec, dict) else spec.model_dump()
    return {
        field: value
        for field in FILE_FIELDS
        if isinstance(value := values.get(field), str) and classify_source(value) == "file"
    }


def check_file_refs(session: Session, *, spec: JobSpec, tenant: str) -> None:
    """422 naming the field: a file that does not exist, is another tenant's, or has the wrong
    purpose (a dataset given as the model)."""
    for field, file_id in file_refs(spec).items():
        file = session.get(File, file_id)
        if file is None or file.tenant != tenant:
            raise InvalidRequest(f"no file with id {file_id!r}", param=field)
        if FILE_FIELDS[field] not in PURPOSES_OF[file.purpose]:
            raise InvalidRequest(
                f"{file_id} was uploaded as a {file.purpose}, not a {FILE_FIELDS[field]}",
                param=field,
            )


def check_job_data(session: Session, *, spec: JobSpec, tenant: str) -> str | None:
    """What POST can tell of a job's data, as 422s naming the field: its uploaded files (there,
    the tenant's, of the right purpose; a dataset's columns as recorded at upload, for the format
    they make), and for a messages job a chat template (the uploaded model's, or the spec's).
    Returns the dataset's format when it is known here (built-in, uploaded, or named)."""
    check_file_refs(session, spec=spec, tenant=tenant)
    refs = file_refs(spec)
    fmt: str | None = None if spec.dataset_format == "auto" else spec.dataset_format
    if spec.dataset in BUILTIN_DATASETS:
        fmt = BUILTIN_DATASET_FORMATS.get(spec.dataset, "text")
    for field in ("dataset", "eval_dataset"):
        if field not in refs:
            continue
        details = session.get_one(File, refs[field]).details
        columns: list[str] = details["columns"]
        try:
            found = spec.format_for(columns)
        except IncompletePairs as exc:  # a file uploaded before such files were refused
            raise InvalidRequest(f"{refs[field]}: {exc}", param=field) from None
        fmt = found if field == "dataset" else fmt
        for spec_field, column in spec.missing_columns(found, columns)[:1]:
            raise InvalidRequest(
                f"column {column!r} is not in {refs[field]} ({found} data; its columns: "
                f"{', '.join(columns)})",
                param=spec_field,
            )
        check_method_fits(spec.method, found, field=field, source=refs[field])
        check_prompts_fit(spec.method, details, field=field, source=refs[field])
    if fmt == "messages" and spec.chat_template is None and not _has_template(session, spec, refs):
        raise InvalidRequest(no_template(refs.get("model", spec.model)), param="chat_template")
    if fmt == "messages":
        _check_function_calling(session, spec, refs)
    return fmt


def _check_function_calling(session: Session, spec: JobSpec, refs: dict[str, str]) -> None:
    """Files whose rows call functions, with a template known here that never reads them: 422
    naming ``tools``, not a silent drop. The template is read, not rendered (rendering runs in
    the worker, which refuses a template that renders them as if absent)."""
    template = known_template(spec.chat_template, spec.model)
    for field in ("dataset", "eval_dataset"):
        if template is None or field not in refs:
            continue
        calling = session.get_one(File, refs[field]).details.get("function_calling") or []
        refusal = template_refusal(
            template, tools="tools" in calling, tool_calls="tool_calls" in calling
        )
        if refusal is not None:
            raise InvalidRequest(f"{refs[field]}: {refusal}", param="tools")


def check_method_fits(method: str, fmt: str | None, *, field: str, source: str) -> None:
    """dpo trains preference pairs and nothing else; sft never trains them (422 naming the
    data's field: the method was chosen, the file is what does not fit it)."""
    if method == "dpo" and fmt not in (None, "preference"):
        raise InvalidRequest(
            f"method dpo trains preference pairs, and {source} holds {fmt} data: give rows "
            "with input, preferred_output and non_preferred_output (or prompt, chosen and "
            "rejected)",
            param=field,
        )
    if method != "dpo" and fmt == "preference":
        raise InvalidRequest(
            f"{source} holds preference pairs: train it with method dpo", param=field
        )


def check_prompts_fit(method: str, details: dict[str, Any], *, field: str, source: str) -> None:
    """grpo samples answers to prompts: every row's messages end with a user turn (recorded at
    upload as ``prompts``); a prompt with no assistant message trains nothing in sft or dpo."""
    if method == "grpo" and not details.get("prompts"):
        raise InvalidRequest(
            f"method grpo trains prompts, and the rows of {source} are not all prompts: give "
            "rows whose messages end with a user turn (other fields are the grader's item)",
            param=field,
        )
    untrained = details.get("untrained_rows") or 0
    if method != "grpo" and untrained:
        raise InvalidRequest(
            f"{source} holds prompts ({untrained} rows with no assistant message to train): "
            "train it with method grpo",
            param=field,
        )


def _has_template(session: Session, spec: JobSpec, refs: dict[str, str]) -> bool:
    """Known at POST for an uploaded model and a built-in one; a hub model is checked as it
    loads (True here)."""
    if "model" in refs:
        return bool(session.get_one(File, refs["model"]).details.get("chat_template"))
    return spec.model not in BUILTIN_MODELS or spec.model in BUILTIN_CHAT_MODELS


def resolve_file_sources(session: Session, settings: Settings, *, job: Job) -> JobSpec:
    """The job's spec with every ``file-…`` id replaced by the local path of its bytes."""
    spec = JobSpec.model_validate(job.spec)
    update: dict[str, str] = {}
    for field, file_id in file_refs(spec).items():
        file = session.get(File, file_id)
        path = local_source(settings, file) if file is not None else None
        if file is None or file.tenant != job.tenant or path is None or not path.exists():
            raise FileUnavailable(f"{field}: file {file_id} no longer exists", param=field)
        update[field] = str(path.resolve())
    if classify_source(spec.model) == "fine_tuned":
        folder = fine_tuned.local_model(session, settings, value=spec.model, tenant=job.tenant)
        update["model"] = str(folder.resolve())
    return spec.model_copy(update=update) if update else spec


def jobs_using(session: Session, *, file_id: str, tenant: str) -> list[str]:
    """The tenant's unfinished jobs (queued, running, paused) whose spec names ``file_id``."""
    unfinished = Job.status.in_(UNFINISHED_STATUSES)
    query = select(Job.id, Job.spec).where(Job.tenant == tenant, unfinished)
    return [row.id for row in session.execute(query) if file_id in file_refs(row.spec).values()]
