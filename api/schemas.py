"""Request and response schemas (Pydantic v2). The ORM models live in ``gradacc.models``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import Row

from gradacc.models import Job, JobEvent, JobStatus
from trainer_core.spec import JobSpec

WEBHOOK_FIELDS = frozenset({"webhook_url", "webhook_on_epoch"})


class JobCreate(JobSpec):
    """The body of POST /v1/jobs: the training core's spec itself, defined once, plus where to
    report (the service's business, not the core's: stored apart from the spec)."""

    webhook_url: str | None = Field(
        default=None,
        description="POSTed the job object, signed (Gradacc-Signature), on every final status",
    )
    webhook_on_epoch: bool = Field(default=False, description="Also after each epoch")


def unix(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


class Progress(BaseModel):
    epoch: int = Field(description="Epochs finished (or the current one while it runs)")
    step: int = Field(description="Optimizer steps done")
    total_steps: int | None = Field(description="Optimizer steps in the whole job, once known")
    elapsed_seconds: float | None = Field(default=None, description="Since the job started")
    eta_seconds: float | None = Field(default=None, description="At the latest step record")
    samples_per_second: float | None = Field(default=None, description="At the latest record")
    train_loss: float | None = Field(default=None, description="The latest step record's")

    @classmethod
    def of(cls, job: Job | Row[Any]) -> Progress:
        live = job.live_progress or {}
        elapsed = None
        if job.started_at is not None:
            elapsed = round(
                ((job.finished_at or datetime.now(UTC)) - job.started_at).total_seconds(), 1
            )
        return cls(
            epoch=job.epoch,
            step=job.step,
            total_steps=job.total_steps,
            elapsed_seconds=elapsed,
            eta_seconds=live.get("eta_seconds") if job.status == JobStatus.RUNNING else None,
            samples_per_second=live.get("samples_per_second"),
            train_loss=live.get("train_loss"),
        )


class JobErrorInfo(BaseModel):
    code: str
    message: str


class JobRead(BaseModel):
    object: Literal["job"] = "job"
    id: str
    status: JobStatus
    spec: dict[str, Any]
    effective_batch_size: int
    created_at: int = Field(description="Unix seconds")
    started_at: int | None
    finished_at: int | None
    attempts: int
    progress: Progress
    metrics: dict[str, Any] | None = Field(description="The latest epoch's record")
    error: JobErrorInfo | None
    webhook_url: str | None = None

    @classmethod
    def of(cls, job: Job | Row[Any]) -> JobRead:
        """From a ``Job``, or a row with its columns (``services.read_job``)."""
        error = None
        if job.error_code is not None:
            error = JobErrorInfo(code=job.error_code, message=job.error_message or "")
        return cls(
            id=job.id,
            status=job.status,
            spec=job.spec,
            effective_batch_size=job.effective_batch_size,
            created_at=int(job.created_at.timestamp()),
            started_at=unix(job.started_at),
            finished_at=unix(job.finished_at),
            attempts=job.attempts,
            progress=Progress.of(job),
            metrics=job.latest_metrics,
            error=error,
            webhook_url=job.webhook_url,
        )


class JobList(BaseModel):
    object: Literal["list"] = "list"
    data: list[JobRead]
    has_more: bool
    last_id: str | None = Field(description="Pass as ?after= to get the next page")


class MetricsList(BaseModel):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]] = Field(
        description="granularity=epoch: one record per finished epoch; step: one per logging step"
    )
    has_more: bool = False
    last_step: int | None = Field(default=None, description="step pages: pass as ?after=")


class EventRead(BaseModel):
    id: int
    created_at: int
    kind: str
    message: str


class EventList(BaseModel):
    object: Literal["list"] = "list"
    data: list[EventRead]

    @classmethod
    def of(cls, rows: list[JobEvent]) -> EventList:
        return cls(
            data=[
                EventRead(
                    id=e.id,
                    created_at=int(e.created_at.timestamp()),
                    kind=e.kind,
                    message=e.message,
                )
                for e in rows
            ]
        )


class WebhookSecretRead(BaseModel):
    object: Literal["webhook_secret"] = "webhook_secret"
    secret: str = Field(description="HMAC-SHA256 key of this tenant's Gradacc-Signature headers")


class ErrorDetail(BaseModel):
    code: str
    message: str
    param: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    status: Literal["ok", "ready"]
    checks: dict[str, str] = Field(default_factory=dict)
