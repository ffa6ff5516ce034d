"""The job as clients see it: the API's responses, the stream's snapshots and the webhooks' bodies,
one model for all three (so a webhook sent by a worker reads like the API's answer)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import Row

from gradacc.sources import fine_tuned
from gradacc.tables import Job, JobStatus

if TYPE_CHECKING:
    from gradacc.scheduling.position import QueueSpot


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
    priority: int = Field(default=0, description="Higher starts first")
    queue_position: int | None = Field(
        default=None, description="Queued: 1 = the next job to start; null when not queued"
    )
    estimated_start: int | None = Field(
        default=None,
        description="Queued: when it may start, Unix seconds, from recent run times (null when "
        "no duration can be estimated yet)",
    )
    micro_batch_size: int | None = Field(
        description="Micro-batch rows in force (null until an 'auto' job has chosen it)"
    )
    gradient_accumulation_steps: int | None = Field(description="K in force, with micro_batch_size")
    dataset_format: str | None = Field(
        default=None,
        description="How the data is read: text, messages or prompt-completion (null until known)",
    )
    created_at: int = Field(description="Unix seconds")
    started_at: int | None
    finished_at: int | None
    attempts: int
    progress: Progress
    metrics: dict[str, Any] | None = Field(description="The latest epoch's record")
    error: JobErrorInfo | None
    outputs: dict[str, int] = Field(
        default_factory=dict,
        description="What the job has written so far: name -> bytes (model, checkpoint, "
        "summary.json, metrics.jsonl, train.log); see /artifacts",
    )
    summary: dict[str, Any] | None = Field(
        default=None,
        description="Once finished: parameters, device, effective batch, rows, steps, timings, "
        "versions",
    )
    webhook_url: str | None = None
    name: str | None = Field(default=None, description="Yours, as given at POST")
    metadata: dict[str, str] | None = Field(
        default=None, description="Yours, as given at POST (here or at /v1/fine_tuning/jobs)"
    )
    suffix: str | None = Field(
        default=None, description="A fine-tuning job's suffix (part of fine_tuned_model)"
    )
    fine_tuned_model: str | None = Field(
        default=None,
        description="Once succeeded: the name that trains or predicts with its model "
        "(ft:<root model>:<tenant>:<suffix>:<job id>; docs/openai.md)",
    )

    @classmethod
    def of(
        cls,
        job: Job | Row[Any],
        spot: QueueSpot | None = None,
    ) -> JobRead:
        """From a ``Job``, or a row with its columns (``services.read_job``); ``spot``: where a
        queued job stands (``gradacc.scheduling.position``)."""
        fine_tuning = job.fine_tuning or {}
        error = None
        if job.error_code is not None:
            error = JobErrorInfo(code=job.error_code, message=job.error_message or "")
        return cls(
            id=job.id,
            status=job.status,
            spec=job.spec,
            effective_batch_size=job.effective_batch_size,
            priority=job.priority,
            queue_position=None if spot is None else spot.position,
            estimated_start=None if spot is None else unix(spot.estimated_start),
            micro_batch_size=job.micro_batch_size,
            gradient_accumulation_steps=job.gradient_accumulation_steps,
            dataset_format=job.dataset_format,
            created_at=int(job.created_at.timestamp()),
            started_at=unix(job.started_at),
            finished_at=unix(job.finished_at),
            attempts=job.attempts,
            progress=Progress.of(job),
            metrics=job.latest_metrics,
            error=error,
            outputs=job.outputs or {},
            summary=public_summary(job.summary),
            webhook_url=job.webhook_url,
            name=job.name,
            metadata=job.job_metadata or fine_tuning.get("metadata"),
            suffix=fine_tuning.get("suffix"),
            fine_tuned_model=_model_name(job),
        )


def _model_name(job: Job | Row[Any]) -> str | None:
    """A succeeded job's model name, until the model is deleted (/v1/models)."""
    if job.status != JobStatus.SUCCEEDED or (job.fine_tuning or {}).get("model_deleted"):
        return None
    return fine_tuned.name_of(job)


def public_summary(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's summary without what the job object already shows (the spec) or what is the
    server's business (its paths)."""
    if summary is None:
        return None
    hidden = ("spec", "model_dir", "adapter_dir", "status")  # server paths: see /artifacts
    return {k: v for k, v in summary.items() if k not in hidden}
