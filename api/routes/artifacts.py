"""/v1/jobs/{id}/artifacts, /checkpoints and /logs: a finished (or running) job's outputs.

Plain ``def`` routes: FastAPI runs them in its thread pool, so a tenant's large output folder or
log is read beside the event loop, never on it (an ``async def`` route would stall every
request of the process while it walks the disk)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import FileResponse, StreamingResponse

from api.deps import ReadEngineDep, ReadSessionDep, SettingsDep, TenantDep
from api.schemas.jobs import ArtifactList, CheckpointList, ErrorResponse
from api.services import artifacts
from api.services import checkpoints as checkpoint_list
from api.services import jobs as job_services
from api.services.merged_model import merged_model
from gradacc import outputs
from trainer_core.spec.outputs import MODEL_DIR, TRAIN_LOG

MERGED_HELP = (
    "model only: a LoRA job's adapters merged into their base, as safetensors that "
    "from_pretrained and vLLM load (a job that is not LoRA: its model as it is)"
)

router = APIRouter(
    prefix="/jobs",
    tags=["artifacts"],
    responses={401: {"model": ErrorResponse}, 404: {"model": ErrorResponse}},
)


@router.get("/{job_id}/artifacts", response_model=ArtifactList)
def list_artifacts(
    job_id: str, engine: ReadEngineDep, settings: SettingsDep, tenant: TenantDep
) -> ArtifactList:
    """The files in a job's output folder: path, bytes and kind."""
    job_services.read_job(engine, job_id=job_id, tenant=tenant)
    return ArtifactList.model_validate({"data": outputs.list_artifacts(settings.jobs_dir / job_id)})


@router.get(
    "/{job_id}/artifacts/model",
    response_class=Response,
    responses={
        200: {"content": {"application/gzip": {}}},
        409: {"model": ErrorResponse, "description": "merged=true: the LoRA job has not succeeded"},
    },
)
def get_model(
    job_id: str,
    engine: ReadEngineDep,
    session: ReadSessionDep,
    settings: SettingsDep,
    tenant: TenantDep,
    merged: Annotated[bool, Query(description=MERGED_HELP)] = False,
) -> Response:
    """The job's `model/` folder as a tar.gz built while it is sent; `merged=true`: a LoRA job's
    adapters merged into their base (made once, in a child process), any other job's model."""
    if not merged:
        return get_artifact(job_id, MODEL_DIR, engine, settings, tenant)
    folder = merged_model(session, settings, job_id=job_id, tenant=tenant)
    return _tar_gz(folder, f"{job_id}-{MODEL_DIR}")


@router.get(
    "/{job_id}/artifacts/{path:path}",
    response_class=Response,
    responses={200: {"content": {"application/gzip": {}, "application/octet-stream": {}}}},
)
def get_artifact(
    job_id: str, path: str, engine: ReadEngineDep, settings: SettingsDep, tenant: TenantDep
) -> Response:
    """`model`, `checkpoint` (the latest) or `checkpoint-<step>` (any kept one): the folder as
    a tar.gz built while it is sent. Any other path from /artifacts: that file, with Range
    support."""
    job_services.read_job(engine, job_id=job_id, tenant=tenant)
    root = settings.jobs_dir / job_id
    if path in artifacts.FOLDERS or outputs.CHECKPOINT_NAME.fullmatch(path):
        return _tar_gz(artifacts.folder_path(root, path), f"{job_id}-{path}")
    return FileResponse(artifacts.artifact_path(root, path), media_type="application/octet-stream")


def _tar_gz(folder: Path, name: str) -> StreamingResponse:
    headers = {"Content-Disposition": f'attachment; filename="{name}.tar.gz"'}
    return StreamingResponse(
        artifacts.tar_gz(folder, name), media_type="application/gzip", headers=headers
    )


@router.get("/{job_id}/checkpoints", response_model=CheckpointList)
def list_checkpoints(
    job_id: str, session: ReadSessionDep, settings: SettingsDep, tenant: TenantDep
) -> CheckpointList:
    """Every checkpoint the job keeps (the latest ``save_total_limit`` and the best), newest
    first: step, epoch, metrics, ``is_best``, its download and the ``model`` name to train from."""
    job = job_services.get_job(session, job_id=job_id, tenant=tenant)
    return checkpoint_list.list_checkpoints(job, settings.jobs_dir / job_id)


@router.get(
    "/{job_id}/logs", response_class=Response, responses={200: {"content": {"text/plain": {}}}}
)
def get_logs(
    job_id: str,
    engine: ReadEngineDep,
    settings: SettingsDep,
    tenant: TenantDep,
    tail: Annotated[int, Query(ge=1, le=100_000, description="Last N lines")] = 200,
) -> Response:
    """The job's train.log: start line, epochs, library warnings, a failure's traceback."""
    job_services.read_job(engine, job_id=job_id, tenant=tenant)
    text = artifacts.tail(settings.jobs_dir / job_id / TRAIN_LOG, tail)
    return Response(text, media_type="text/plain; charset=utf-8")
