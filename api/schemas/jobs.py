"""Request and response schemas (Pydantic v2). The ORM models live in ``gradacc.tables``; the job
object itself (``JobRead``) in ``gradacc.job_view``, as webhooks send it from any process."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from gradacc.job_view import JobRead, Progress, public_summary, unix
from gradacc.settings import PRIORITY_BOUND
from gradacc.tables import File, FilePurpose, JobEvent, Worker
from trainer_core.spec.job import JobSpec

__all__ = ["JobCreate", "JobRead", "Progress", "public_summary", "unix"]

# The service's fields of a POST, stored apart from the core's spec.
SERVICE_FIELDS = frozenset({"webhook_url", "webhook_on_epoch", "priority", "name", "metadata"})
MetadataKey = Annotated[str, StringConstraints(min_length=1, max_length=64)]
MetadataValue = Annotated[str, StringConstraints(max_length=512)]


class JobCreate(JobSpec):
    """The body of POST /v1/jobs: the training core's spec itself, defined once, plus where to
    report and how soon to run (the service's business, not the core's: stored apart from the
    spec)."""

    priority: int = Field(
        default=0,
        ge=-PRIORITY_BOUND,
        le=PRIORITY_BOUND,
        description="Higher starts first; at most GRADACC_MAX_PRIORITY (the schema's maximum). "
        "Among equal priorities, tenants take turns (docs/scheduling.md)",
        examples=[0],
    )
    webhook_url: str | None = Field(
        default=None,
        description="POSTed the job object, signed (Gradacc-Signature), on every final status",
        examples=["https://hooks.example.com/gradacc"],
    )
    webhook_on_epoch: bool = Field(
        default=False, description="Also after each epoch", examples=[False]
    )
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="Yours, shown in the list",
        examples=["bert-lr-sweep-3"],
    )
    metadata: dict[MetadataKey, MetadataValue] | None = Field(
        default=None,
        max_length=16,
        description="Up to 16 string pairs; the list filters on them (metadata[key]=value)",
        examples=[{"sweep": "lr", "owner": "ana"}],
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
    secret: str = Field(
        description="whsec_<base64 key>: this tenant's Gradacc-Signature HMAC key (the whole "
        "string) and Standard Webhooks secret (webhook-signature, the decoded key)"
    )


class FileRead(BaseModel):
    object: Literal["file"] = "file"
    id: str
    filename: str
    bytes: int
    sha256: str
    purpose: FilePurpose
    created_at: int = Field(description="Unix seconds")
    details: dict[str, Any] = Field(
        description="What validation found: a dataset's format, rows and columns; a model's "
        "format, files, unpacked bytes and model_type"
    )
    status: Literal["processed"] = Field(
        default="processed", description="OpenAI's: checked and stored (a bad upload is refused)"
    )
    status_details: str | None = None

    @classmethod
    def of(cls, file: File) -> FileRead:
        return cls(
            id=file.id,
            filename=file.filename,
            bytes=file.bytes,
            sha256=file.sha256,
            purpose=FilePurpose(file.purpose),
            created_at=int(file.created_at.timestamp()),
            details=file.details,
        )


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileRead]
    has_more: bool
    last_id: str | None = Field(description="Pass as ?after= to get the next page")


class FileDeleted(BaseModel):
    object: Literal["file"] = "file"
    id: str
    deleted: bool = True


class ArtifactRead(BaseModel):
    path: str = Field(description="Relative to the job's folder; GET /artifacts/{path}")
    bytes: int
    kind: Literal["model", "checkpoint", "log", "metrics", "summary", "other"]


class ArtifactList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ArtifactRead]


class CheckpointRead(BaseModel):
    """Shaped like the OpenAI fine-tuning API's checkpoint object."""

    object: Literal["fine_tuning.job.checkpoint"] = "fine_tuning.job.checkpoint"
    id: str
    created_at: int
    fine_tuning_job_id: str
    fine_tuned_model_checkpoint: str = Field(description="Where to download it (a tar.gz)")
    model: str = Field(
        description="Pass as a new job's `model` to continue or branch from this checkpoint"
    )
    step_number: int
    epoch: int = Field(description="Epochs finished when it was written")
    metrics: dict[str, Any] = Field(
        description="The latest epoch's record at that point, with the evaluation made at "
        "(or last before) its step"
    )
    is_best: bool = Field(
        default=False,
        description="The best by metric_for_best_model so far (with load_best_model_at_end or "
        "early_stopping_patience)",
    )


class CheckpointList(BaseModel):
    object: Literal["list"] = "list"
    data: list[CheckpointRead]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None


class JobDeleted(BaseModel):
    object: Literal["job"] = "job"
    id: str
    deleted: bool = True


class FieldError(BaseModel):
    param: str | None = Field(description="The field, dotted for nested ones; null: the body")
    message: str


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable, machine-readable: e.g. invalid_request, no_workers")
    message: str = Field(description="For a person; names the field when there is one")
    param: str | None = Field(default=None, description="The field at fault, if any")
    type: str = Field(
        default="invalid_request_error",
        description="OpenAI's error type: invalid_request_error, authentication_error, "
        "rate_limit_error, server_error...",
    )
    errors: list[FieldError] | None = Field(
        default=None, description="Validation errors only: every one found, the first as above"
    )


class ErrorResponse(BaseModel):
    error: ErrorDetail


class WorkerRead(BaseModel):
    object: Literal["worker"] = "worker"
    name: str | None = Field(description="host:pid, as in a job's events (operators only)")
    hostname: str | None = Field(description="Operators only (GRADACC_OPERATOR_TENANTS)")
    pid: int | None = Field(description="Operators only")
    devices: list[str] = Field(description="cpu, and cuda:N for each GPU the host has")
    current_job: str | None = Field(description="The job it is running, if any (and yours)")
    started_at: int = Field(description="Unix seconds")
    heartbeat_at: int = Field(description="Unix seconds; alive while recent")

    @classmethod
    def of(cls, worker: Worker, *, show_job: bool = True, show_host: bool = True) -> WorkerRead:
        return cls(
            name=worker.name if show_host else None,
            hostname=worker.hostname if show_host else None,
            pid=worker.pid if show_host else None,
            devices=list(worker.devices),
            current_job=worker.current_job if show_job else None,
            started_at=int(worker.started_at.timestamp()),
            heartbeat_at=int(worker.heartbeat_at.timestamp()),
        )


class WorkerList(BaseModel):
    object: Literal["list"] = "list"
    data: list[WorkerRead] = Field(description="Workers alive now, by name")


class Health(BaseModel):
    status: Literal["ok", "ready"]
    checks: dict[str, str] = Field(default_factory=dict)
    workers: list[WorkerRead] | None = Field(
        default=None, description="/readyz: the workers alive and their current jobs"
    )
