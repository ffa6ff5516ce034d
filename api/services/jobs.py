"""Use cases of /v1/jobs: keyword-only, verb-first, one commit each. No HTTP in here."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from typing import Any

from celery import Celery
from sqlalchemy import Engine, Row, bindparam, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.schemas.jobs import SERVICE_FIELDS, JobCreate
from api.services.files import content_path
from api.services.limits import check_job_limits
from api.uploads.datasets import check_labels
from gradacc.errors import (
    IdempotencyConflict,
    JobActive,
    JobBusy,
    JobNotFound,
)
from gradacc.jobs.records import METRICS_EVENT, add_event
from gradacc.jobs.states import (
    held_by_worker,
    is_job_id,
    lock_tenant,
    new_job,
    require_transition,
)
from gradacc.jobs.webhook_outbox import check_webhook_url
from gradacc.scheduling.capacity import check_devices
from gradacc.scheduling.queue import enqueue_job
from gradacc.serving.grader_models import check_grader_models
from gradacc.settings import Settings
from gradacc.sources.files import check_job_data, file_refs
from gradacc.sources.fine_tuned import check_model as check_fine_tuned
from gradacc.sources.graders import check_job_grader
from gradacc.sources.limits import check_priority, check_spec_allowed
from gradacc.sources.memory import check_fits as check_memory
from gradacc.tables import (
    FINE_TUNING_API,
    TRAINING,
    UNFINISHED_STATUSES,
    EpochMetric,
    File,
    Job,
    JobEvent,
    JobStatus,
    JobStream,
    StepMetric,
    utcnow,
)
from trainer_core.spec.job import JobSpec
from trainer_core.spec.sources import classify_source

log = logging.getLogger(__name__)


def create_job(
    session: Session,
    *,
    spec: JobCreate,
    tenant: str,
    idempotency_key: str | None,
    celery: Celery,
    settings: Settings,
    fine_tuning: dict[str, Any] | None = None,
) -> tuple[Job, bool]:
    """Commit the job as queued, then enqueue it; returns (job, created). With an idempotency
    key already used by this tenant, returns that job (same spec) or raises (another spec).
    A failed enqueue leaves the job for the reconciler. ``fine_tuning``: a job created through
    /v1/fine_tuning/jobs, with its OpenAI fields."""
    check_spec_allowed(spec, settings)
    check_priority(spec.priority, settings)
    check_devices(spec, session=session, settings=settings)
    check_memory(spec, settings)
    if spec.webhook_url is not None:
        check_webhook_url(spec.webhook_url, settings)
    body = spec.model_dump(mode="json")
    request_hash = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    payload = {k: v for k, v in body.items() if k not in SERVICE_FIELDS}  # the core's spec
    if idempotency_key is not None:
        earlier = _job_with_key(session, tenant=tenant, key=idempotency_key)
        if earlier is not None:
            return _replayed(earlier, request_hash), False
    lock_tenant(session, tenant=tenant)  # also keeps a file it names from being deleted now
    dataset_format = check_job_data(session, spec=spec, tenant=tenant)
    check_job_grader(spec)
    if spec.grpo is not None:  # its model graders answer for this tenant, as graders/run's do
        check_grader_models(session, settings, spec.grpo.grader, tenant=tenant, where="grpo.grader")
    if classify_source(spec.model) == "fine_tuned":
        check_fine_tuned(session, settings, value=spec.model, tenant=tenant)
    _check_labels(session, spec=spec, settings=settings)
    check_job_limits(session, tenant=tenant, settings=settings)
    job = new_job(
        tenant=tenant,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        spec=payload,
        effective_batch_size=spec.effective_batch_size,
        priority=spec.priority,
        num_processes=spec.num_processes,
        num_machines=spec.num_machines,
        micro_batch_size=None if spec.auto_micro_batch else spec.per_device_train_batch_size,
        gradient_accumulation_steps=spec.gradient_accumulation_steps,
        dataset_format=dataset_format,
        enqueued_at=utcnow(),
        webhook_url=spec.webhook_url,
        webhook_on_epoch=spec.webhook_on_epoch,
        name=spec.name,
        job_metadata=spec.metadata,
        api=None if fine_tuning is None else FINE_TUNING_API,
        fine_tuning=fine_tuning,
    )
    session.add(job)
    add_event(session, job_id=job.id, kind="queued", message="job created")
    try:
        session.commit()
    except IntegrityError:
        # A concurrent POST with the same key won the unique constraint: answer with its job.
        session.rollback()
        if idempotency_key is None:
            raise
        earlier = _job_with_key(session, tenant=tenant, key=idempotency_key)
        if earlier is None:
            raise
        return _replayed(earlier, request_hash), False
    processes = spec.processes_per_machine  # the queue of workers with that many
    enqueue(session, job=job, celery=celery, settings=settings, processes=processes)
    log.info("job %s queued (tenant %s)", job.id, tenant)
    return job, True


def enqueue(
    session: Session, *, job: Job, celery: Celery, settings: Settings, processes: int
) -> None:
    try:
        enqueue_job(celery, settings, job.id, processes)
    except Exception as exc:  # the broker is down: the row is safe, the reconciler retries
        log.warning("enqueue of %s failed (%s); the reconciler will retry", job.id, exc)
        job.enqueued_at = None
        add_event(session, job_id=job.id, kind="enqueue_failed", message=type(exc).__name__)
        session.commit()


def _check_labels(session: Session, *, spec: JobSpec, settings: Settings) -> None:
    """A label column other than the default, on an uploaded dataset, is read now: empty cells
    or a mix of numbers and text are a 422 naming the row (the default one was read at upload)."""
    column = spec.resolved_label_column
    if column is None or column == "label":
        return
    for field, file_id in file_refs(spec).items():
        if field != "model":
            file = session.get_one(File, file_id)
            fmt = str(file.details.get("format"))
            check_labels(content_path(settings, file), fmt, column, param="label_column")


def _job_with_key(session: Session, *, tenant: str, key: str | None) -> Job | None:
    query = select(Job).where(Job.tenant == tenant, Job.idempotency_key == key)
    return session.scalar(query)


def _replayed(job: Job, request_hash: str) -> Job:
    if job.request_hash != request_hash:
        raise IdempotencyConflict()
    return job


def get_job(session: Session, *, job_id: str, tenant: str) -> Job:
    """Another tenant's job does not exist, as far as this tenant can tell (404, not 403)."""
    job = session.get(Job, job_id) if is_job_id(job_id) else None
    if job is None or job.tenant != tenant or job.kind != TRAINING:
        raise JobNotFound(job_id)
    return job


# The poll endpoints read plain rows through statements built once: on the ORM path, building a
# select and loading a ``Job`` cost more than the query itself (docs/benchmarks.md).
_POLL_JOB = select(
    Job.id,
    Job.status,
    Job.spec,
    Job.effective_batch_size,
    Job.priority,
    Job.micro_batch_size,
    Job.gradient_accumulation_steps,
    Job.dataset_format,
    Job.created_at,
    Job.started_at,
    Job.finished_at,
    Job.attempts,
    Job.epoch,
    Job.step,
    Job.total_steps,
    Job.latest_metrics,
    Job.error_code,
    Job.error_message,
    Job.summary,
    Job.outputs,
    Job.live_progress,
    Job.webhook_url,
    Job.name,
    Job.job_metadata.label("job_metadata"),
    Job.tenant,
    Job.fine_tuning,
).where(Job.id == bindparam("job_id"), Job.tenant == bindparam("tenant"), Job.kind == TRAINING)
JOB_COLUMNS = _POLL_JOB.selected_columns  # what JobRead.of needs of a row
_POLL_METRICS = (
    select(EpochMetric.record)
    .join_from(Job, EpochMetric, isouter=True)
    .where(Job.id == bindparam("job_id"), Job.tenant == bindparam("tenant"), Job.kind == TRAINING)
    .order_by(EpochMetric.epoch)
)


def read_job(engine: Engine, *, job_id: str, tenant: str) -> Row[Any]:
    """``get_job`` for polling: the columns ``JobRead`` shows, in one autocommit round trip."""
    row = None
    if is_job_id(job_id):
        with engine.connect() as connection:
            row = connection.execute(_POLL_JOB, {"job_id": job_id, "tenant": tenant}).first()
    if row is None:
        raise JobNotFound(job_id)
    return row


def list_jobs(
    session: Session,
    *,
    tenant: str,
    status: JobStatus | None,
    limit: int,
    after: str | None,
    name: str | None = None,
    metadata: dict[str, str] | None = None,
) -> tuple[list[Job], bool]:
    """Newest first; keyset pagination on the time-ordered id. Returns (page, has_more). With
    ``name`` or ``metadata`` pairs, only the jobs that have them."""
    query = select(Job).where(Job.tenant == tenant, Job.kind == TRAINING)
    query = query.order_by(Job.id.desc()).limit(limit + 1)
    if name is not None:
        query = query.where(Job.name == name)
    for key, value in (metadata or {}).items():
        query = query.where(Job.job_metadata[key].as_string() == value)
    if status is not None:
        query = query.where(Job.status == status)
    if after is not None:
        query = query.where(Job.id < after)
    jobs = list(session.scalars(query))
    return jobs[:limit], len(jobs) > limit


def list_metrics(engine: Engine, *, job_id: str, tenant: str) -> list[dict[str, Any]]:
    """The epoch records in order, in one round trip: the outer join gives no row for no such
    job, and a single row without a record for a job with no epoch finished yet."""
    records: list[dict[str, Any] | None] = []
    if is_job_id(job_id):
        with engine.connect() as connection:
            params = {"job_id": job_id, "tenant": tenant}
            records = list(connection.scalars(_POLL_METRICS, params))
    if not records:
        raise JobNotFound(job_id)
    return [record for record in records if record is not None]


def list_step_metrics(
    engine: Engine, *, job_id: str, tenant: str, after: int, limit: int
) -> tuple[list[dict[str, Any]], bool]:
    """Step records after step ``after``, in order, one page; (page, has_more)."""
    read_job(engine, job_id=job_id, tenant=tenant)  # 404 for no such job of this tenant
    query = (
        select(StepMetric.record)
        .where(StepMetric.job_id == job_id, StepMetric.step > after)
        .order_by(StepMetric.step)
        .limit(limit + 1)
    )
    with engine.connect() as connection:
        records = list(connection.scalars(query))
    return records[:limit], len(records) > limit


def list_events(session: Session, *, job_id: str, tenant: str) -> list[JobEvent]:
    get_job(session, job_id=job_id, tenant=tenant)
    # The step records are /metrics' (the fine-tuning API's events list them as metrics events).
    query = select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind != METRICS_EVENT)
    query = query.order_by(JobEvent.id)
    return list(session.scalars(query))


def cancel_job(session: Session, *, job_id: str, tenant: str) -> Job:
    """Queued: cancelled at once. Running: cancelled now; its worker kills the process group
    within a second. Finished: refused (``InvalidTransition``)."""
    get_job(session, job_id=job_id, tenant=tenant)
    require_transition(session, job_id=job_id, to=JobStatus.CANCELLED, finished_at=utcnow())
    add_event(session, job_id=job_id, kind="cancelled", message="cancelled by request")
    session.commit()
    return get_job(session, job_id=job_id, tenant=tenant)


def delete_job(session: Session, *, settings: Settings, job_id: str, tenant: str) -> None:
    """A finished job: its rows (metrics and events too), then its outputs. Queued or running:
    ``JobActive`` (cancel first). Finished but still held by the worker that ran it (a cancel
    it is still carrying out): ``JobBusy``, so no worker writes to what is deleted."""
    job = get_job(session, job_id=job_id, tenant=tenant)
    if job.status in UNFINISHED_STATUSES:
        raise JobActive(job_id, job.status)
    if held_by_worker(job, stale_after_s=settings.stale_after_s):
        raise JobBusy(job_id, job.status)
    session.delete(job)
    session.execute(delete(JobStream).where(JobStream.job_id == job_id))  # no foreign key
    session.commit()
    shutil.rmtree(settings.jobs_dir / job_id, ignore_errors=True)
    log.info("job %s deleted with its outputs", job_id)
