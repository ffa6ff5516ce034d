"""/v1/files: upload (streamed to disk), list, read, download, delete. A tenant sees only its own."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from api.deps import ReadSessionDep, SessionDep, SettingsDep, TenantDep
from api.schemas.jobs import ErrorResponse, FileDeleted, FileList, FileRead
from api.schemas.preview import PreviewRead, PreviewRequest
from api.services import files as file_services
from api.services.preview import preview_file
from gradacc.tables import FilePurpose
from trainer_core.spec.sources import FILE_ID_PATTERN

router = APIRouter(
    prefix="/files",
    tags=["files"],
    responses={401: {"model": ErrorResponse}, 404: {"model": ErrorResponse}},
)

UPLOAD_DOC = """Multipart form: `file` (the bytes) and `purpose`: `dataset` (default; .csv, .jsonl,
.json or .parquet, checked and counted), `fine-tune` (OpenAI's: a JSONL of `messages`,
`prompt`/`completion` or preference rows, each line checked) or `model` (a .tar.gz or .zip of a `save_pretrained` directory with
safetensors weights). Streamed to disk; over `GRADACC_MAX_UPLOAD_BYTES` is 413, and so is an
upload that would take the tenant past `GRADACC_MAX_STORAGE_BYTES_PER_TENANT`. Other parts than
`file` and `purpose`, or either twice, are refused."""


# The body is parsed as a stream (api/uploads/receive.py), so FastAPI cannot infer it: declared here.
UPLOAD_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {
                    "file": {"type": "string", "format": "binary", "description": "The bytes"},
                    "purpose": {
                        "type": "string",
                        "enum": ["dataset", "model", "fine-tune"],
                        "default": "dataset",
                    },
                },
            }
        }
    },
}


@router.post(
    "",
    response_model=FileRead,
    status_code=201,
    summary="Upload a dataset or a model",
    description=UPLOAD_DOC,
    responses={
        400: {"model": ErrorResponse, "description": "A fine-tune upload that is not usable"},
        413: {"model": ErrorResponse, "description": "Over the upload size or storage limit"},
        422: {"model": ErrorResponse, "description": "Not a readable dataset or a safe model"},
    },
    openapi_extra={"requestBody": UPLOAD_BODY},
)
async def upload_file(
    request: Request, session: SessionDep, settings: SettingsDep, tenant: TenantDep
) -> FileRead:
    upload = await file_services.receive_within_quota(
        request, session, settings=settings, tenant=tenant
    )
    # The OpenAI SDK's uploads get OpenAI's status codes for what is wrong with them (api.errors).
    request.state.openai_errors = upload.fields.get("purpose") == FilePurpose.FINE_TUNE
    file = await run_in_threadpool(  # checking and unpacking read the whole file: not on the loop
        file_services.create_file, session, settings=settings, tenant=tenant, upload=upload
    )
    return FileRead.of(file)


@router.get("", response_model=FileList)
async def list_files(
    session: ReadSessionDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[str | None, Query(pattern=FILE_ID_PATTERN, description="last_id")] = None,
    purpose: FilePurpose | None = None,
) -> FileList:
    """Your files, newest first (of one `purpose` if given); page with `after` = `last_id`."""
    files, has_more = file_services.list_files(
        session, tenant=tenant, limit=limit, after=after, purpose=purpose
    )
    last_id = files[-1].id if files else None
    return FileList(data=[FileRead.of(f) for f in files], has_more=has_more, last_id=last_id)


@router.get("/{file_id}", response_model=FileRead)
async def get_file(file_id: str, session: ReadSessionDep, tenant: TenantDep) -> FileRead:
    """One uploaded file: name, size, sha256, purpose and what validation found."""
    return FileRead.of(file_services.get_file(session, file_id=file_id, tenant=tenant))


@router.get("/{file_id}/content", response_class=FileResponse)
async def get_file_content(
    file_id: str, session: ReadSessionDep, settings: SettingsDep, tenant: TenantDep
) -> FileResponse:
    """The bytes as uploaded (Range requests work)."""
    file = file_services.get_file(session, file_id=file_id, tenant=tenant)
    path = file_services.content_path(settings, file)
    return FileResponse(path, filename=file.filename, media_type="application/octet-stream")


@router.post(
    "/{file_id}/preview",
    response_model=PreviewRead,
    responses={422: {"model": ErrorResponse, "description": "A field, naming it"}},
)
def preview_dataset(
    file_id: str,
    body: PreviewRequest,
    session: ReadSessionDep,
    settings: SettingsDep,
    tenant: TenantDep,
) -> PreviewRead:
    """What a job with these data fields would train on the file's first rows: each token with
    whether it is trained (after the shift), each row's trained and total tokens (the counts the
    trainer divides by) and warnings (nothing trained, cut by max_seq_length, a template without
    generation markers, an empty think block trained)."""
    return preview_file(session, settings, file_id=file_id, tenant=tenant, body=body)


@router.delete("/{file_id}", response_model=FileDeleted, responses={409: {"model": ErrorResponse}})
def delete_file(
    file_id: str, session: SessionDep, settings: SettingsDep, tenant: TenantDep
) -> FileDeleted:
    """409 while a queued or running job uses the file."""
    file_services.delete_file(session, settings=settings, file_id=file_id, tenant=tenant)
    return FileDeleted(id=file_id)
