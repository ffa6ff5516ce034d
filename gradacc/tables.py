"""ORM models: jobs, their epoch and step records and events, the webhook outbox and secrets,
API keys, the worker registry and uploaded files. The API's schemas live in ``api.schemas.jobs``."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out; SQLite stores them naive, so UTC is re-attached on load."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Asked to pause (the fine-tuning API's pause): it checkpoints at the next window boundary
    # and lets go of its device; resume queues it again, and it goes on from that checkpoint.
    PAUSED = "paused"


# A job holds resources (a queue slot, a worker) until it leaves these.
ACTIVE_STATUSES = frozenset({JobStatus.QUEUED, JobStatus.RUNNING})
TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
# Not finished: its files stay in use, and it cannot be deleted (a paused job will resume).
UNFINISHED_STATUSES = ACTIVE_STATUSES | {JobStatus.PAUSED}
FINE_TUNING_API = "fine_tuning"  # jobs.api of a job created through /v1/fine_tuning/jobs


DEFAULT_TENANT = "default"  # every job's tenant while authentication is off


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def processes_per_machine(num_processes: int, num_machines: int) -> int:
    """The devices a job takes on each machine: the queue of workers that have them."""
    return num_processes // num_machines


TRAINING = "training"  # a job's kind as the tenant's job lists show it (``Job.kind``)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(
            "status IN (" + ", ".join(f"'{status}'" for status in JobStatus) + ")", name="status"
        ),
        Index("ix_jobs_status_id", "status", "id"),
        Index("ix_jobs_tenant_id", "tenant", "id"),
        # The claim's walk over tenants and their heads (gradacc.scheduling.order): only queued
        # rows, so it stays as small as the queue however long the history grows.
        Index(
            "ix_jobs_queued_tenant_priority_id",
            "tenant",
            "priority",
            "id",
            "num_processes",
            postgresql_where=text("status = 'queued'"),
            sqlite_where=text("status = 'queued'"),
        ),
        # Two POSTs with one key race to this constraint; the loser returns the winner's job.
        UniqueConstraint("tenant", "idempotency_key", name="uq_jobs_tenant_idempotency_key"),
    )

    # "job_" + 12 hex digits of milliseconds + 8 random: ids sort by creation time (keyset pages).
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(
        String(64), default=DEFAULT_TENANT, server_default=DEFAULT_TENANT
    )
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64), doc="sha256 of the spec")
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    effective_batch_size: Mapped[int] = mapped_column(Integer)
    # "training", or "tinker": a Tinker session's host (``gradacc.tinker.placement``), placed by
    # the same claim but kept out of the tenant's job lists (its spec names the session only).
    kind: Mapped[str] = mapped_column(String(16), default=TRAINING, server_default=TRAINING)
    # Higher starts first (docs/scheduling.md). num_processes is the spec's, in a column so that
    # the claim compares it with a worker's devices and sums the devices a tenant has in use.
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    num_processes: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # Machines the processes span (gang scheduling, gradacc.scheduling.gang): num_processes / num_machines
    # devices on each; a worker fits the job when it has that many.
    num_machines: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # The queued job of higher priority that preempts this running one: its worker checkpoints
    # it and queues it again (gradacc.scheduling.preemption).
    preempted_by: Mapped[str | None] = mapped_column(String(32))
    # Gang releases while fewer live machines could hold it than it needs (gradacc.scheduling.gang):
    # each backs its next message off longer; at ``gang_max_releases`` the job fails.
    gang_releases: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # In force now: the spec's, chosen by the machine ("auto"), or halved after running out of
    # memory; micro-batch x K x num_processes is always effective_batch_size.
    micro_batch_size: Mapped[int | None] = mapped_column(Integer)
    gradient_accumulation_steps: Mapped[int | None] = mapped_column(Integer)
    # text, messages or prompt-completion: known at POST for built-in and uploaded data.
    dataset_format: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(255))  # who claimed it last
    # When that worker let go of it (process gone, last rows written); None while it holds it.
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A resume asked while its worker was still letting go of the paused job: that worker
    # queues it again as it lets go (``gradacc.jobs.states.release_job``).
    resume_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    pid: Mapped[int | None] = mapped_column(Integer)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    step: Mapped[int] = mapped_column(Integer, default=0)
    total_steps: Mapped[int | None] = mapped_column(Integer)
    latest_metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The latest step record's train_loss, samples_per_second and eta_seconds (progress).
    live_progress: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Its outputs on disk, name -> bytes, recorded by its worker when they change (gradacc.outputs).
    outputs: Mapped[dict[str, int] | None] = mapped_column(JSON)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    # POSTed (signed) on every final status, and after each epoch with webhook_on_epoch.
    webhook_url: Mapped[str | None] = mapped_column(String(2048))
    # A person's own name and labels for the job (POST /v1/jobs); the list filters on them.
    name: Mapped[str | None] = mapped_column(String(128))
    job_metadata: Mapped[dict[str, str] | None] = mapped_column("metadata", JSON)
    webhook_on_epoch: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # "fine_tuning" for a job created through /v1/fine_tuning/jobs (None: /v1/jobs). Its OpenAI
    # fields live in ``fine_tuning``: suffix, metadata, method, hyperparameters, result_files,
    # integrations and, once its model is deleted through /v1/models, model_deleted.
    api: Mapped[str | None] = mapped_column(String(16))
    fine_tuning: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    metrics: Mapped[list[EpochMetric]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="EpochMetric.epoch"
    )
    events: Mapped[list[JobEvent]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="JobEvent.id"
    )

    @property
    def processes_per_machine(self) -> int:
        return processes_per_machine(self.num_processes, self.num_machines)


class EpochMetric(Base):
    __tablename__ = "epoch_metrics"
    __table_args__ = (UniqueConstraint("job_id", "epoch", name="uq_epoch_metrics_job_id_epoch"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    epoch: Mapped[int] = mapped_column(Integer)
    train_loss: Mapped[float | None] = mapped_column(Float)
    eval_loss: Mapped[float | None] = mapped_column(Float)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    seq: Mapped[int | None] = mapped_column(Integer)  # its place in the job's stream (JobStream)

    job: Mapped[Job] = relationship(back_populates="metrics")


class StepMetric(Base):
    """One record every ``logging_steps`` optimizer steps (``TrainingCallback.on_step_metrics``)."""

    __tablename__ = "step_metrics"
    __table_args__ = (UniqueConstraint("job_id", "step", name="uq_step_metrics_job_id_step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    seq: Mapped[int | None] = mapped_column(Integer)  # its place in the job's stream (JobStream)


class JobEvent(Base):
    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    # kind "metrics" (one per step record, for the fine-tuning API's events): the record's
    # step, losses and token accuracies. /v1/jobs' events and the stream leave those out.
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    seq: Mapped[int | None] = mapped_column(Integer)  # its place in the job's stream (JobStream)

    job: Mapped[Job] = relationship(back_populates="events")


class JobStream(Base):
    """The last place handed out in a job's stream. Each write of its stream rows takes the next
    one under the job's stream lock (``gradacc.jobs.records``), so places follow commit order
    across the three tables, and a reader that reads this first, then the rows up to it, sees
    whole writes only: a live stream and its replay give the same order. No foreign key: the
    job's first row (its "queued" event) is written in the transaction that adds the job."""

    __tablename__ = "job_streams"

    job_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)


class WebhookDelivery(Base):
    """An outbox row: one webhook to send (written with the status change or epoch it reports,
    in the same transaction), then its attempts' outcome."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_status_next", "status", "next_attempt_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(32))  # job.succeeded, job.failed, job.epoch, ...
    status: Mapped[str] = mapped_column(String(16), default="pending")  # delivered, failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class WebhookSecret(Base):
    """A tenant's webhook signing secret (created on first use)."""

    __tablename__ = "webhook_secrets"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiKey(Base):
    """A bearer token's sha256 (never the token) and the tenant it acts for."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Worker(Base):
    """A Celery worker that is up: written by the worker itself when it is ready, refreshed by a
    heartbeat thread, deleted at its warm shutdown. A row whose heartbeat is old is a worker that
    died without saying so; it is not counted alive (``gradacc.workers``)."""

    __tablename__ = "workers"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)  # host:pid, as on jobs
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    devices: Mapped[list[str]] = mapped_column(JSON)
    # GRADACC_DEVICES: the most num_processes it takes (its gloo processes on a CPU worker).
    num_devices: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # GRADACC_MACHINE (default: the host name): what gang scheduling and capacity count machines by.
    machine: Mapped[str | None] = mapped_column(String(255))
    # GRADACC_QUEUE: the jobs it takes (capacity counts the workers of the API's queue only).
    queue: Mapped[str | None] = mapped_column(String(255))
    current_job: Mapped[str | None] = mapped_column(String(32))
    # Where its predict server answers OpenAI's chat completions, and the token it wants there
    # (one it made itself when GRADACC_SERVE_TOKEN is unset): written by that server.
    serve_url: Mapped[str | None] = mapped_column(String(255))
    serve_token: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class GangSlot(Base):
    """One machine's part of a job over several machines (``gradacc.scheduling.gang``): the worker holding
    W/M devices there for it, and where the others reach it. Node 0 (the job's claimer) also
    records the rendezvous port. One slot per machine and per node rank of a job."""

    __tablename__ = "gang_slots"
    __table_args__ = (UniqueConstraint("job_id", "machine", name="uq_gang_slots_job_id_machine"),)

    job_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    node_rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker: Mapped[str] = mapped_column(String(255))
    machine: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    port: Mapped[int | None] = mapped_column(Integer)
    held_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TenantTurn(Base):
    """When a tenant last had a job started: of tenants with as few devices in use, the next job
    goes to the one whose turn came longest ago (``gradacc.scheduling.claim``)."""

    __tablename__ = "tenant_turns"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    last_started_at: Mapped[datetime] = mapped_column(UTCDateTime)


class FilePurpose(StrEnum):
    DATASET = "dataset"
    MODEL = "model"
    FINE_TUNE = "fine-tune"  # OpenAI's: a messages or prompt-completion JSONL dataset
    FINE_TUNE_RESULTS = "fine-tune-results"  # a fine-tuning job's metrics CSV (written by it)
    BATCH = "batch"  # OpenAI's: a batch's requests, a JSON line each
    BATCH_OUTPUT = "batch_output"  # a batch's answers or errors (written by it)
    EVALS = "evals"  # OpenAI's: an eval run's items, a JSON line each


class File(Base):
    """An uploaded dataset or model; its bytes live under ``settings.files_dir / id``."""

    __tablename__ = "files"
    __table_args__ = (
        CheckConstraint(
            "purpose IN (" + ", ".join(f"'{p}'" for p in FilePurpose) + ")", name="purpose"
        ),
        Index("ix_files_tenant_id", "tenant", "id"),
    )

    # "file-" + 12 hex digits of milliseconds + 8 random: ids sort by creation time (keyset pages).
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    purpose: Mapped[str] = mapped_column(String(32))
    filename: Mapped[str] = mapped_column(String(255), doc="as the client named it")
    stored_name: Mapped[str] = mapped_column(String(64), doc="the upload's name on disk")
    bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, doc="what validation found")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class PredictionStatus(StrEnum):
    PENDING = "pending"  # waiting for a worker's predict server
    RUNNING = "running"  # one has taken it
    DONE = "done"
    FAILED = "failed"


class Prediction(Base):
    """One POST /v1/jobs/{id}/predict: the API writes the request and waits; a worker's predict
    server (``worker.predict``) takes it, answers, and the API returns the answer. The table is the
    queue both stacks share (no broker round trip, no result backend)."""

    __tablename__ = "predictions"
    __table_args__ = (Index("ix_predictions_status_id", "status", "id"),)

    # "pred_" + 12 hex digits of milliseconds + 8 random: taken oldest first.
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(32), ForeignKey("jobs.id", ondelete="CASCADE"))
    tenant: Mapped[str] = mapped_column(String(64))
    step: Mapped[int | None] = mapped_column(Integer, doc="a checkpoint's step; null: model/")
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=PredictionStatus.PENDING)
    response: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    worker: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    answered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class StoredResponse(Base):
    """A ``/v1/responses`` answer kept (``store``, OpenAI's default) for ``GET``, its
    ``input_items`` and a later ``previous_response_id``: the conversation is the chain of
    ``previous_id`` back to its first response, each holding its own input and output items."""

    __tablename__ = "responses"
    __table_args__ = (Index("ix_responses_tenant_id", "tenant", "id"),)

    # "resp_" + 12 hex digits of milliseconds + 8 random.
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    previous_id: Mapped[str | None] = mapped_column(String(40))
    input_items: Mapped[list[Any]] = mapped_column(JSON, doc="this request's items, with ids")
    body: Mapped[dict[str, Any]] = mapped_column(JSON, doc="the response object as answered")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ModelAlias(Base):
    """A tenant's own alias: requests naming ``alias`` (a name or a ``prefix*`` pattern) are
    answered by ``model`` (``gradacc.serving.aliases``)."""

    __tablename__ = "model_aliases"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    alias: Mapped[str] = mapped_column(String(512), primary_key=True)
    model: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class BatchStatus(StrEnum):
    VALIDATING = "validating"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


class Batch(Base):
    """One ``/v1/batches`` batch: its input file's lines are answered one by one by a worker
    (``worker.consumer.batch_runner``), each answer kept as a ``BatchLine``; the output and error
    files are written from those rows when it ends. A worker holds it by a lease it renews, so
    another takes it over when that worker dies, and goes on from the rows kept."""

    __tablename__ = "batches"
    __table_args__ = (Index("ix_batches_tenant_id", "tenant", "id"),)

    # "batch_" + 12 hex digits of milliseconds + 8 random.
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    input_file_id: Mapped[str] = mapped_column(String(32))
    endpoint: Mapped[str] = mapped_column(String(64))
    completion_window: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default=BatchStatus.VALIDATING)
    total: Mapped[int] = mapped_column(Integer, default=0, doc="lines in the input file")
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON)
    errors: Mapped[list[Any] | None] = mapped_column(JSON, doc="why the batch failed")
    output_file_id: Mapped[str | None] = mapped_column(String(32))
    error_file_id: Mapped[str | None] = mapped_column(String(32))
    holder: Mapped[str | None] = mapped_column(String(255), doc="the worker running it")
    held_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    in_progress_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finalizing_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, doc="completed, failed...")
    cancelling_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class BatchLine(Base):
    """One answered line of a batch (its place in the input file): OpenAI's output line, or its
    error line. Written once, the line's answer and its row in one commit: a line kept is never
    asked again."""

    __tablename__ = "batch_lines"

    batch_id: Mapped[str] = mapped_column(
        String(40), ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True
    )
    line: Mapped[int] = mapped_column(Integer, primary_key=True)
    failed: Mapped[bool] = mapped_column(Boolean, doc="goes to the error file")
    record: Mapped[dict[str, Any]] = mapped_column(JSON, doc="the output (or error) file's line")


class RunStatus(StrEnum):
    """An eval run's or a distillation's: OpenAI's eval run statuses, with ``canceling`` (asked,
    not yet seen by the worker holding it)."""

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    CANCELING = "canceling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"


class ItemWork:
    """What an eval run and a distillation share: their items' progress and the lease a worker
    holds them by (``gradacc.leases``; ``worker.consumer.item_runner`` does their items)."""

    status: Mapped[str] = mapped_column(String(16), default=RunStatus.QUEUED)
    total: Mapped[int] = mapped_column(Integer, default=0, doc="its items")
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, doc="why it failed")
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON)
    holder: Mapped[str | None] = mapped_column(String(255), doc="the worker running it")
    held_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Eval(Base):
    """One ``/v1/evals`` eval: what its items look like and the graders every run of it uses."""

    __tablename__ = "evals"
    __table_args__ = (Index("ix_evals_tenant_id", "tenant", "id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(256))
    data_source_config: Mapped[dict[str, Any]] = mapped_column(JSON, doc="as OpenAI answers it")
    testing_criteria: Mapped[list[Any]] = mapped_column(JSON, doc="graders, as sent")
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class EvalRun(ItemWork, Base):
    """A run of an eval: its items sampled from a model (or read with their samples) and graded
    by a worker (``worker.consumer.item_runner``), each item kept as a ``RunItem``. Held by a
    renewed lease, like a batch, so another worker goes on when its holder dies."""

    __tablename__ = "eval_runs"
    __table_args__ = (Index("ix_eval_runs_eval_id", "eval_id", "id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    eval_id: Mapped[str] = mapped_column(String(40), ForeignKey("evals.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(256))
    model: Mapped[str | None] = mapped_column(String(512), doc="sampled; None: samples given")
    data_source: Mapped[dict[str, Any]] = mapped_column(JSON, doc="as sent, checked")


class Distillation(ItemWork, Base):
    """A teacher model sampled on a prompt file into a chat training file of the tenant's: each
    prompt's answer kept as a ``RunItem`` as it comes, so a worker that dies loses none and the
    teacher is never asked twice for a row."""

    __tablename__ = "distillations"
    __table_args__ = (Index("ix_distillations_tenant_id", "tenant", "id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    teacher: Mapped[str] = mapped_column(String(512))
    prompt_file_id: Mapped[str] = mapped_column(String(32))
    sampling: Mapped[dict[str, Any]] = mapped_column(JSON, doc="sent with every prompt")
    output_file_id: Mapped[str | None] = mapped_column(String(32))


class RunItem(Base):
    """One finished item of an eval run or a distillation (``run_id`` is either's id), written
    once, in the commit that records it: an item kept is never asked or graded again."""

    __tablename__ = "run_items"

    run_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    item: Mapped[int] = mapped_column(Integer, primary_key=True, doc="its place, from 0")
    status: Mapped[str] = mapped_column(String(16), doc="pass, fail, error (evals); ok, error")
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
