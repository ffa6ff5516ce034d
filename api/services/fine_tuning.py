"""The fine-tuning API's reads: a job as OpenAI's ``fine_tuning.job``, its events newest first,
its kept checkpoints, and the list with ``metadata[k]=v`` filters. No HTTP in here."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from api.schemas.openai import (
    FineTuningCheckpoint,
    FineTuningEvent,
    FineTuningJob,
    JobError,
)
from api.schemas.openai_hyperparameters import ResolvedHyperparameters
from api.services.jobs import get_job
from gradacc.errors import InvalidRequest, JobNotFound
from gradacc.job_view import unix
from gradacc.jobs.records import METRICS_EVENT
from gradacc.openai.names import evaluation_metrics, openai_metrics, openai_param
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.tables import FINE_TUNING_API, Job, JobEvent, JobStatus, StepMetric
from trainer_core.spec.outputs import CHECKPOINT_STATE, kept_checkpoints

WARN_KINDS = frozenset(
    {"warning", "restarted", "replanned", "stopped", "enqueue_failed", "throttled", "requeued"}
)
EVENT_PREFIX = "ftevent-"
CHECKPOINT_PREFIX = "ftckpt-"


def get_fine_tuning_job(session: Session, *, job_id: str, tenant: str) -> Job:
    """A job created through /v1/fine_tuning/jobs; any other (or another tenant's) is 404."""
    job = get_job(session, job_id=job_id, tenant=tenant)
    if job.api != FINE_TUNING_API:
        raise JobNotFound(job_id)
    return job


def to_openai(job: Job | Row[Any]) -> FineTuningJob:
    """OpenAI's ``fine_tuning.job``: the one shape of a fine-tuning job, wherever it appears
    (create, retrieve, list, cancel, pause, resume, and the snapshots of its stream, which
    give a row of ``api.services.jobs.JOB_COLUMNS``)."""
    ft = job.fine_tuning or {}
    done = job.status == JobStatus.SUCCEEDED and not fine_tuned.model_deleted(job)
    error = _error(job, ft)
    eta = (job.live_progress or {}).get("eta_seconds")
    estimated = None
    if job.status == JobStatus.RUNNING and isinstance(eta, int | float):
        estimated = int(time.time() + eta)
    return FineTuningJob(
        id=job.id,
        created_at=int(job.created_at.timestamp()),
        finished_at=unix(job.finished_at),
        status=job.status,  # the same names
        model=job.spec["model"],
        fine_tuned_model=fine_tuned.name_of(job) if done else None,
        organization_id=job.tenant,
        training_file=ft.get("training_file", job.spec["dataset"]),
        validation_file=ft.get("validation_file"),
        result_files=list(ft.get("result_files") or []),
        trained_tokens=ft.get("trained_tokens"),
        estimated_finish=estimated,
        error=error,
        hyperparameters=ResolvedHyperparameters(**ft["hyperparameters"]),
        method=ft["method"],
        seed=int(ft.get("seed", job.spec.get("seed", 0))),
        metadata=ft.get("metadata"),
        user_provided_suffix=ft.get("suffix"),
    )


def _error(job: Job | Row[Any], ft: dict[str, Any]) -> JobError | None:
    """The failure with the field it names in the body's words (``dataset`` is training_file)."""
    if job.error_code is None:
        return None
    message, param = job.error_message or "", ft.get("error_param")
    if param is None:
        return JobError(code=job.error_code, message=message)
    named = openai_param(param, str(ft.get("method", {}).get("type", "supervised")))
    if message.startswith(f"{param}: "):
        message = f"{named}: {message.removeprefix(f'{param}: ')}"
    return JobError(code=job.error_code, message=message, param=named)


def list_fine_tuning_jobs(
    session: Session, *, tenant: str, after: str | None, limit: int, metadata: dict[str, str]
) -> tuple[list[Job], bool]:
    """Newest first, keyset on the time-ordered id; each ``metadata`` pair must match."""
    query = select(Job).where(Job.tenant == tenant, Job.api == FINE_TUNING_API)
    for key, value in metadata.items():
        query = query.where(Job.fine_tuning[("metadata", key)].as_string() == value)
    if after is not None:
        query = query.where(Job.id < after)
    jobs = list(session.scalars(query.order_by(Job.id.desc()).limit(limit + 1)))
    return jobs[:limit], len(jobs) > limit


def metadata_filters(params: list[tuple[str, str]]) -> dict[str, str]:
    """``metadata[k]=v`` query parameters (OpenAI's filter form)."""
    found = {}
    for name, value in params:
        if name.startswith("metadata[") and name.endswith("]") and len(name) > len("metadata[]"):
            found[name[len("metadata[") : -1]] = value
        elif name.startswith("metadata"):
            raise InvalidRequest("filter as metadata[key]=value", param=name)
    return found


def _level(kind: str) -> str:
    if kind == "failed":
        return "error"
    return "warn" if kind in WARN_KINDS else "info"


def list_events(
    session: Session, *, job: Job, after: str | None, limit: int
) -> tuple[list[FineTuningEvent], bool]:
    """Newest first; ``after`` is an event id from an earlier page."""
    query = select(JobEvent).where(JobEvent.job_id == job.id)
    if after is not None:
        query = query.where(JobEvent.id < _number(after, EVENT_PREFIX, "after"))
    rows = list(session.scalars(query.order_by(JobEvent.id.desc()).limit(limit + 1)))
    events = [
        FineTuningEvent(
            id=f"{EVENT_PREFIX}{row.id}",
            created_at=int(row.created_at.timestamp()),
            level=_level(row.kind),
            message=row.message,
            type="metrics" if row.kind == METRICS_EVENT else "message",
            data=row.data,
        )
        for row in rows[:limit]
    ]
    return events, len(rows) > limit


def _number(value: str, prefix: str, param: str) -> int:
    digits = value.removeprefix(prefix)
    if not value.startswith(prefix) or not digits.isdigit() or len(digits) > 18:
        raise InvalidRequest(f"not an id from this list: {value!r}", param=param)
    return int(digits)


def list_checkpoints(
    session: Session, settings: Settings, *, job: Job, after: str | None, limit: int
) -> tuple[list[FineTuningCheckpoint], bool]:
    """The kept checkpoints, newest first; ``after`` is a checkpoint id from an earlier page."""
    found = kept_checkpoints(settings.jobs_dir / job.id)
    if after is not None:
        step = _number(after, f"{CHECKPOINT_PREFIX}{job.id}-", "after")
        found = [item for item in found if item[0] < step]
    page = [
        _checkpoint(job, step, folder, state, _step_record(session, job_id=job.id, step=step))
        for step, folder, state in found[:limit]
    ]
    return page, len(found) > limit


def _step_record(session: Session, *, job_id: str, step: int) -> dict[str, Any]:
    """The step record at (or last before) ``step``: its train_loss and token accuracy are the
    checkpoint's, as OpenAI's checkpoint metrics are the step's."""
    query = select(StepMetric.record).where(StepMetric.job_id == job_id, StepMetric.step <= step)
    return session.scalars(query.order_by(StepMetric.step.desc()).limit(1)).first() or {}


def _checkpoint(
    job: Job, step: int, folder: Path, state: dict[str, Any], at_step: dict[str, Any]
) -> FineTuningCheckpoint:
    epochs = state.get("metrics") or [{}]
    last = epochs[-1]
    # The step's training figures; the evaluation is the epoch's (the last one saved with it).
    train = {k: v for k, v in at_step.items() if not k.startswith("eval_")}
    metrics = openai_metrics(last | train) | {"step": float(step)} | evaluation_metrics(last)
    return FineTuningCheckpoint(
        id=f"{CHECKPOINT_PREFIX}{job.id}-{step}",
        created_at=int((folder / CHECKPOINT_STATE).stat().st_mtime),
        fine_tuning_job_id=job.id,
        fine_tuned_model_checkpoint=fine_tuned.checkpoint_name(job, step),
        step_number=step,
        metrics=metrics,
    )
