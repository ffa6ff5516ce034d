"""The Celery side's entry: the app, the run-job task (claim the job idempotently, then supervise
its training process) and every Celery signal this worker hooks (reconciler, fork server,
preemption at shutdown).

Start a worker with ``gradacc worker`` or ``celery -A worker.consumer.tasks:app worker``.
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from typing import Any

from celery import Celery, current_app, shared_task
from celery.signals import worker_ready, worker_shutdown, worker_shutting_down
from pydantic import ValidationError

from gradacc.db import get_sessionmaker, session_scope
from gradacc.errors import InvalidRequest
from gradacc.executors.protocol import Executor, JobShape, Placement
from gradacc.jobs.records import add_event
from gradacc.jobs.states import fail_job, release_job
from gradacc.scheduling.queue import (
    JOIN_GANG_TASK,
    RUN_JOB_TASK,
    create_celery_app,
    enqueue_job,
    processes_of,
    send_or_leave,
)
from gradacc.settings import Settings, get_settings
from gradacc.sources.limits import check_spec_allowed
from gradacc.tables import Job
from gradacc.tinker import placement
from gradacc.webhook_sender import WebhookSender
from trainer_core.spec.job import JobSpec
from worker.consumer import gang_node, launcher, predict_process, registry
from worker.consumer.batch_runner import BatchRunner
from worker.consumer.claiming import leave_for_others, take_for_message
from worker.consumer.executors import LocalExecutor, executor_for
from worker.consumer.item_runner import ItemRunner
from worker.consumer.reconciler import start_reconciler_thread
from worker.consumer.supervisor import (
    release_preempted,
    shutdown_requested,
    supervise,
    worker_name,
)
from worker.consumer.tinker_runner import TinkerRunner

log = logging.getLogger(__name__)


@shared_task(name=RUN_JOB_TASK, ignore_result=True)
def run_job(job_id: str) -> None:
    """A message naming job ``job_id``: start the best queued job (this one, or another one
    before it; ``worker.consumer.claiming``) unless none may start. Logs what happened; returns
    nothing, so Celery's own line reads "succeeded: None" (the task did its work) instead of
    "succeeded: 'failed'" for a failed job."""
    log.info("message for job %s: %s", job_id, handle_job(job_id))


@shared_task(name=JOIN_GANG_TASK, ignore_result=True)
def join_gang(job_id: str) -> None:
    """A gang job gathering its machines (``worker.consumer.gang_node``) asks for this one."""
    if shutdown_requested.is_set():
        log.info("gang of job %s not joined: this worker is stopping", job_id)
        return
    app = current_app._get_current_object()
    settings = get_settings()
    local = LocalExecutor(settings, app)  # join messages are the local executor's gang admission
    outcome = gang_node.join_and_run(
        settings, app, job_id=job_id, worker=worker_name(), executor=local
    )
    log.info("join message for job %s: %s", job_id, outcome)


def handle_job(job_id: str) -> str:
    """Claim and supervise; returns what happened: "skipped" when there was nothing to start,
    "throttled", or the started job's outcome ("succeeded", "failed", "preempted"...)."""
    settings = get_settings()
    worker = worker_name()
    app = current_app._get_current_object()
    if shutdown_requested.is_set():
        # A stopping worker can still be handed a message (the one it just re-sent, even): leave
        # the job to the others; the reconciler sends it again.
        log.info("job %s left for another worker: this one is stopping", job_id)
        leave_for_others(settings, named=job_id)
        return "skipped"

    def send(named: str) -> bool:
        return send_or_leave(app, settings, named)

    taken = take_for_message(settings, named=job_id, worker=worker, send=send)
    if taken.job_id is None:
        if taken.note == "throttled":
            log.info("job %s waits: its tenant is at its running-job limit", job_id)
            return "throttled"
        log.info(
            "job %s is not claimable (done, running elsewhere or cancelled), nor another", job_id
        )
        return "skipped"
    return _run(settings, app, taken.job_id, worker)


def _run(settings: Settings, app: Celery, job_id: str, worker: str) -> str:
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        assert job is not None  # just claimed
        refusal = _refusal(job, settings)
        if refusal is not None:
            # Deterministic: the same spec fails the same way on any worker, so no retry.
            fail_job(
                session, job_id=job_id, code="invalid_request", message=refusal, owned_by=worker
            )
            release_job(session, job_id=job_id, worker=worker, jobs_dir=settings.jobs_dir)
            session.commit()
            return "failed"
        shape = JobShape(job_id, job.num_machines, job.processes_per_machine, job.attempts)
    executor = executor_for(settings, app)
    # Every machine held, or none (local: gang admission, worker.consumer.gang_node).
    admitted = executor.admit(shape, worker=worker)
    placement = admitted.placement
    if placement is None:
        return admitted.note
    gang = placement.num_machines > 1
    with session_scope(settings) as session:
        message = f"started on {worker} (attempt {job.attempts})"
        if gang:  # the machines' names are the operator's: logged, not in the tenant's event
            message += f", a gang of {job.num_machines} machines"
        add_event(session, job_id=job_id, kind="started", message=message)
        session.commit()
    log.info("job %s started (attempt %d) %s", job_id, job.attempts, ", ".join(placement.machines))
    outcome = _supervise(settings, executor, placement=placement, worker=worker)
    outcome = _hand_on(settings, app, job_id=job_id, outcome=outcome, gang=gang)
    log.info("job %s %s", job_id, outcome)
    return outcome


def _hand_on(settings: Settings, app: Celery, *, job_id: str, outcome: str, gang: bool) -> str:
    """A job that goes on elsewhere gets its message now; the outcome for the log."""
    # A gang job preempted without a priority: this worker, or another node's, is stopping
    # (its preempt request reached rank 0 through the shared job directory). Hand it on now.
    stopping = outcome == "preempted" and (shutdown_requested.is_set() or gang)
    if stopping and release_preempted(settings, job_id=job_id):
        send_or_leave(app, settings, job_id)
        outcome = "released"
    elif outcome == "restarting" and release_preempted(
        settings, job_id=job_id, message="a rank died: the gang gathers again and resumes"
    ):  # the next node 0 takes it over from the queue (gradacc.jobs.restarts)
        send_or_leave(app, settings, job_id)
    elif outcome == "requeued":  # preempted by a job of higher priority: queued again
        try:
            enqueue_job(app, settings, job_id, processes_of(settings, job_id))
        except Exception as exc:  # the broker is down: the reconciler sends it later
            log.warning("job %s: its message could not be sent (%s)", job_id, exc)
            leave_for_others(settings, named=job_id)
    return outcome


def _supervise(settings: Settings, executor: Executor, *, placement: Placement, worker: str) -> str:
    """Run the placed job to its end; its machines are released however it ends."""
    job_id = placement.job_id
    registry.mark_job(settings, job_id)
    try:
        return supervise(settings, job_id=job_id, executor=executor, placement=placement)
    finally:
        registry.mark_job(settings, None)
        executor.release(placement, worker=worker)


def _refusal(job: Job, settings: Settings) -> str | None:
    """Check the stored spec again on this worker's filesystem (data roots, limits) before any
    training process starts; the reason it may not run, or None. (A Tinker host job's models
    are checked by the API as they are made.)"""
    if job.kind == placement.KIND:
        return None
    try:
        check_spec_allowed(JobSpec.model_validate(job.spec), settings)
    except InvalidRequest as exc:
        return exc.message
    except ValidationError as exc:
        return f"the stored spec is no longer valid: {exc.error_count()} errors"
    return None


_stopping = threading.Event()


@worker_ready.connect
def _start_fork_server(sender: Any = None, **_: Any) -> None:
    """Before the first job: the fork server imports torch and the core (seconds), not the job."""
    launcher.warm(get_settings())


@worker_ready.connect
def _start_reconciler(sender: Any = None, **_: Any) -> None:
    settings = get_settings()
    app = current_app._get_current_object()

    def enqueue(job_id: str) -> None:
        enqueue_job(app, settings, job_id, processes_of(settings, job_id))

    start_reconciler_thread(settings, enqueue=enqueue, stop=_stopping)


@worker_ready.connect
def _send_webhooks(sender: Any = None, **_: Any) -> None:
    """The outbox is drained by every worker too: webhooks go out while no API runs."""
    settings = get_settings()
    WebhookSender(get_sessionmaker(settings), settings).start_thread(_stopping)


@worker_ready.connect
def _run_batches(sender: Any = None, **_: Any) -> None:
    """Batches are answered by every worker, a line at a time, when it is not training."""
    BatchRunner(get_settings(), worker_name(), _stopping).start_thread()


@worker_ready.connect
def _run_items(sender: Any = None, **_: Any) -> None:
    """Eval runs and distillations likewise, an item at a time, when it is not training."""
    ItemRunner(get_settings(), worker_name(), _stopping).start_thread()


@worker_ready.connect
def _host_tinker(sender: Any = None, **_: Any) -> None:
    """Tinker sessions (docs/tinker.md) are hosted by jobs; the sweep queues one a session lacks."""
    app = current_app._get_current_object()
    TinkerRunner(get_settings(), worker_name(), _stopping, app).start_thread()


@worker_ready.connect
def _register(sender: Any = None, **_: Any) -> None:
    """Last of the ready hooks: the fork server is warm, so a registered worker can take a job."""
    settings = get_settings()
    registry.register(settings)
    registry.start_heartbeat_thread(settings, stop=_stopping)
    log.info("worker %s ready", worker_name())


@worker_ready.connect
def _start_predict_server(sender: Any = None, **_: Any) -> None:
    predict_process.start(get_settings())


@worker_shutdown.connect
def _stop_reconciler(sender: Any = None, **_: Any) -> None:
    _stopping.set()
    predict_process.stop()
    registry.unregister(get_settings())


@worker_shutting_down.connect
def _preempt_running_job(sender: Any = None, **_: Any) -> None:
    shutdown_requested.set()


@lru_cache(maxsize=1)
def default_app() -> Celery:
    """This worker's app: the kernel's queue settings with this module's task."""
    return create_celery_app(get_settings(), include=[__name__])


def __getattr__(name: str) -> Any:
    # ``celery -A worker.consumer.tasks:app`` looks the app up by name; build it on first use,
    # so that importing this module creates no broker folders and reads no settings.
    if name == "app":
        return default_app()
    raise AttributeError(name)
