"""POST /v1/files/import: OpenAI's stored completions and OpenAI's or Together's fine-tuning files
made a training file in one call (docs/imports.md)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from api.deps import SessionDep, SettingsDep, TenantDep
from api.schemas.file_imports import FileImportRead
from api.schemas.jobs import ErrorResponse
from api.services import file_imports, files
from gradacc.openai.imports import IMPORT_FORMATS

router = APIRouter(
    prefix="/files",
    tags=["files"],
    responses={401: {"model": ErrorResponse}},
)

IMPORT_DOC = """Multipart form: `file`, JSON lines of OpenAI's stored chat completions (a
`ChatCompletion` with its request's `input_messages`, or `{request, response}`), OpenAI's
fine-tuning rows (chat with per-message `weight`, tools; preference; legacy prompt/completion)
or Together's (per-message `weight` on any role, `text`, prompt/completion); `format`: `auto`
(default: each line by its shape), `stored-completions`, `openai` or `together`; `bad_rows`:
`skip` (default: keep the good rows, name the others) or `refuse` (all or nothing). The rows are
written as OpenAI's fine-tuning JSONL and stored as a `fine-tune` file (a `dataset` file for
text rows), with the checks, limits and tenancy of `POST /v1/files`. The answer is that file
plus `refused_rows` and `refused` (`{line, reason}`); 400 naming the lines when no row converts
(or any, with `bad_rows` refuse). Rows are trained exactly as written, or refused: a per-sample
`weight` other than 0 or 1 is refused (docs/imports.md)."""

IMPORT_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {
                    "file": {"type": "string", "format": "binary", "description": "JSON lines"},
                    "format": {"type": "string", "enum": list(IMPORT_FORMATS), "default": "auto"},
                    "bad_rows": {"type": "string", "enum": ["skip", "refuse"], "default": "skip"},
                },
            }
        }
    },
}


@router.post(
    "/import",
    response_model=FileImportRead,
    status_code=201,
    summary="Import stored completions or a fine-tuning file as a training file",
    description=IMPORT_DOC,
    responses={
        400: {"model": ErrorResponse, "description": "No usable row, naming the lines"},
        413: {"model": ErrorResponse, "description": "Over the upload size or storage limit"},
    },
    openapi_extra={"requestBody": IMPORT_BODY},
)
async def import_file(
    request: Request, session: SessionDep, settings: SettingsDep, tenant: TenantDep
) -> FileImportRead:
    request.state.openai_errors = True  # refusals are 400s, as a fine-tune upload's (api.errors)
    upload = await files.receive_within_quota(
        request, session, settings=settings, tenant=tenant, parts=file_imports.IMPORT_PARTS
    )
    file, report = await run_in_threadpool(  # reads and writes the whole file: not on the loop
        file_imports.import_file, session, settings=settings, tenant=tenant, upload=upload
    )
    return FileImportRead.of_import(file, report)
