"""Run one job in a fresh child process and watch it: heartbeat, cancel, exit status.

The child gets its own session (and so its own process group): a cancel kills the group, which
takes any data-loader processes with it, and CUDA state never crosses a fork.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
import time
from datetime import UTC, datetime

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError

from gradacc.db import DATABASE_ERRORS, session_scope
from gradacc.executors.protocol import Execution, Executor, Placement
from gradacc.jobs.records import add_event
from gradacc.jobs.restarts import restart_or_fail
from gradacc.jobs.states import fail_job, release_job, update_running_job
from gradacc.scheduling.preemption import requeue_preempted
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, utcnow
from trainer_core.spec.outputs import TRAIN_LOG, kept_checkpoints
from worker import exit_codes
from worker.consumer.time_limit import TIME_LIMIT, TimeLimit, fail_timed_out

log = logging.getLogger(__name__)

STATUS_POLL_S = 1.0  # how soon a cancel is seen; each read wakes the database server
FINISH_GRACE_S = 60.0  # from writing its final status to exiting (saving the model, flushing)


# Set when the worker is asked to shut down: the running job is preempted (checkpoint, exit 75)
# instead of holding the shutdown until it finishes; another worker resumes it later.
shutdown_requested = threading.Event()


def worker_name() -> str:
    """This worker process, as recorded on the jobs it claims."""
    return f"{socket.gethostname()}:{os.getpid()}"


def supervise(
    settings: Settings,
    *,
    job_id: str,
    executor: Executor,
    placement: Placement,
    owner: str | None = None,
) -> str:
    """Train the job (``executor`` starts it as placed) and watch it until it ends; its
    outcome. ``owner``: node 0's worker, when this worker holds another node of a gang job
    (``gradacc.scheduling.gang``): it watches the job as node 0's (a cancel, a take-over) but
    neither beats nor records the outcome."""
    output_dir = settings.jobs_dir / job_id
    output_dir.mkdir(parents=True, exist_ok=True)
    node = owner is not None and owner != worker_name()
    # Local: forked from a pre-imported server (worker.consumer.launcher), no import on its path.
    log_name = f"{TRAIN_LOG}.{settings.machine}" if node else TRAIN_LOG  # a log per machine
    child = executor.start(placement, log_path=output_dir / log_name)
    if not node:
        with session_scope(settings) as session:
            update_running_job(session, job_id=job_id, pid=child.pid)
            session.commit()
    stopped_by = _watch(settings, job_id, child, holder=owner or worker_name())
    if node:
        exit_status = _describe(child.wait())
        return f"node stopped ({stopped_by})" if stopped_by else f"node exited ({exit_status})"
    return _finish(settings, job_id, child.wait(), stopped_by)


def _watch(settings: Settings, job_id: str, child: Execution, *, holder: str) -> str | None:
    """Wait for the child. Returns None when it exited by itself, else why it was stopped.
    ``holder``: the worker the job must stay with (this one, or a gang's node 0)."""
    next_beat = 0.0
    me = holder
    beats = holder == worker_name()  # a gang's other nodes leave the heartbeat to node 0
    preempt_sent = False
    # Node 0 (or the only node) enforces the wall-clock limit of this run.
    limit = TimeLimit(settings, job_id) if beats else None
    while True:
        try:
            child.wait(timeout=STATUS_POLL_S)
            return TIME_LIMIT if limit is not None and limit.asked else None
        except subprocess.TimeoutExpired:
            pass
        if shutdown_requested.is_set() and not preempt_sent:
            child.preempt()  # the runner checkpoints and exits as preempted
            preempt_sent = True
        if limit is not None and limit.reached() and not preempt_sent:
            child.preempt()  # a checkpoint, then it exits as preempted
            preempt_sent = True
        beat = time.monotonic() >= next_beat
        try:
            status, owner, preempted_by = _read_status(settings, job_id, beat=beat and beats)
        except DATABASE_ERRORS:
            # The database blipped: the child keeps training (its writes wait for the database);
            # keep watching. If it stays away past stale_after_s, another worker may take over,
            # and the first status read after it returns stops this child ("taken over").
            log.warning("job %s: database unreachable while watching; still waiting", job_id)
            continue
        if beat:
            next_beat = time.monotonic() + settings.heartbeat_interval_s
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
            # The child wrote its own outcome and is on its way out: let it finish cleanly.
            _await_exit(child, grace_s=FINISH_GRACE_S)
            return None
        paused = status == JobStatus.PAUSED
        if (paused or (status == JobStatus.RUNNING and preempted_by)) and owner == me:
            # Paused, or preempted by a job of higher priority (gradacc.scheduling.preemption): it
            # checkpoints at the next window boundary and exits as preempted.
            if not preempt_sent:
                child.preempt()
                preempt_sent = True
            continue
        if status != JobStatus.RUNNING or owner != me:
            # Cancelled (or deleted, or handed to another worker): stop it within seconds.
            child.stop(grace_s=settings.kill_grace_s)
            return "cancelled" if status == JobStatus.CANCELLED else "taken over"


def _await_exit(child: Execution, *, grace_s: float) -> None:
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        child.stop(grace_s=1.0)


def _read_status(
    settings: Settings, job_id: str, *, beat: bool
) -> tuple[str | None, str | None, str | None]:
    """(status, the worker holding it, the job preempting it)."""
    with session_scope(settings) as session:
        if beat:
            # Paused jobs too: a resume waits until this worker has let go (``held_by_worker``).
            update_running_job(session, job_id=job_id, heartbeat_at=utcnow())
            session.commit()
        job = session.get(Job, job_id)
        return (None, None, None) if job is None else (job.status, job.worker, job.preempted_by)


def _finish(settings: Settings, job_id: str, returncode: int, stopped_by: str | None) -> str:
    """Record how the training process ended, and let go of the job; returns the job's outcome
    for the task log."""
    # SIGUSR1 can arrive before the runner installed its handler (while Python starts): that
    # kills it, which is a preemption too; nothing was trained that a checkpoint would lose.
    timed_out = stopped_by == TIME_LIMIT
    if timed_out:  # asked to stop at a checkpoint, not killed: its exit is read as any other
        stopped_by = None
    if returncode in (exit_codes.PREEMPTED, -signal.SIGUSR1):
        outcome = _preempted(settings, job_id, timed_out=timed_out)
    elif returncode == -signal.SIGKILL and stopped_by is None:
        outcome = _hand_on_killed(settings, job_id)
    elif returncode == exit_codes.RESTART and stopped_by is None:
        outcome = "restarting"  # a gang job's rank died (restart recorded): the caller hands on
    else:
        outcome = _record_exit(settings, job_id, returncode, stopped_by)
    with session_scope(settings) as session:
        jobs_dir = settings.jobs_dir
        if release_job(session, job_id=job_id, worker=worker_name(), jobs_dir=jobs_dir):
            outcome = "requeued"  # resumed while it let go: the caller sends its message
        session.commit()
    return outcome


def _preempted(settings: Settings, job_id: str, *, timed_out: bool = False) -> str:
    """Preempted by priority: queued again ("requeued"; the caller sends it a message). Past its
    time limit: failed, its checkpoint kept. Running: the worker is stopping; the job, still
    "running", is handed on. Paused: it waits, with its checkpoint, for a resume."""
    with session_scope(settings) as session:
        if requeue_preempted(session, job_id=job_id, worker=worker_name()) is not None:
            session.commit()
            return "requeued"
        if timed_out and fail_timed_out(
            session, settings=settings, job_id=job_id, worker=worker_name()
        ):
            session.commit()
            return "failed"
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.PAUSED:
            return "preempted"
        kept = kept_checkpoints(settings.jobs_dir / job_id)
        step = kept[0][0] if kept else 0
        message = f"paused at step {step}: checkpoint kept, device released"
        add_event(session, job_id=job_id, kind="paused", message=message)
        session.commit()
    return "paused"


def _record_exit(settings: Settings, job_id: str, returncode: int, stopped_by: str | None) -> str:
    exit_status = _describe(returncode)
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        if job is None:  # deleted meanwhile (a worker presumed dead): nothing left to record
            return "deleted"
        # Still running after the process is gone: it died before recording an outcome.
        fail_job(
            session,
            job_id=job_id,
            code="process_died",
            message=f"training process exited with status {exit_status}",
            owned_by=worker_name(),  # not if another worker has taken the job over
            event=f"exit status {exit_status}",
        )
        session.refresh(job)
        if stopped_by is not None or job.status == JobStatus.CANCELLED:
            # Killed by us, or it saw the cancel itself (e.g. before training began).
            reason = stopped_by or "cancelled"
            message = f"training process stopped ({reason}), exit status {exit_status}"
            add_event(session, job_id=job_id, kind="stopped", message=message)
        status = job.status
        try:
            session.commit()
        except IntegrityError:  # the row went between the read and the write
            log.info("job %s was deleted while its outcome was written", job_id)
            return "deleted"
        return status


def _hand_on_killed(settings: Settings, job_id: str) -> str:
    """SIGKILL from outside (the OOM killer, an operator's kill -9): nothing is wrong with the job,
    so it resumes from its last checkpoint, up to ``max_restarts`` times (``gradacc.jobs.restarts``).
    Its heartbeat is made stale at once, so the next reconciler pass re-sends it."""
    cause = "training process killed by SIGKILL"
    if not restart_or_fail(settings, job_id, cause=cause, owned_by=worker_name()):
        return "failed"  # past max_restarts (or no longer ours): the outcome is recorded
    with session_scope(settings) as session:
        gone = datetime(1970, 1, 1, tzinfo=UTC)
        update_running_job(session, job_id=job_id, heartbeat_at=gone, pid=None)
        session.commit()
    return "restarted"


def release_preempted(
    settings: Settings, *, job_id: str, message: str = "worker stopping; re-queued"
) -> bool:
    """At this worker's warm shutdown: let another worker take the preempted job now rather than
    after ``stale_after_s``. Its heartbeat is made stale (so ``claim_job`` lets anyone take it)
    and its last enqueue is forgotten, so that any reconciler pass re-sends it (a restarted
    worker's first pass, at start); the caller also enqueues it for a worker that is up now.
    False if the job is no longer ours."""
    with session_scope(settings) as session:
        gone = datetime(1970, 1, 1, tzinfo=UTC)
        stmt = update(Job).where(
            Job.id == job_id, Job.status == JobStatus.RUNNING, Job.worker == worker_name()
        )
        released = session.execute(stmt.values(heartbeat_at=gone, pid=None, enqueued_at=None))
        if released.rowcount != 1:  # type: ignore[attr-defined]
            return False
        add_event(session, job_id=job_id, kind="released", message=message)
        session.commit()
    return True


def _describe(returncode: int) -> str:
    if returncode < 0:
        return f"{returncode} (killed by {signal.Signals(-returncode).name})"
    return str(returncode)
