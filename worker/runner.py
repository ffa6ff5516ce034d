"""The training process for one job: ``main([job_id])``, in a child forked from the worker's fork
server (``worker.launcher``), or ``python -m worker.runner JOB_ID`` in a cold process.

Exit status: 0 when the outcome is recorded, 75 when preempted (checkpoint kept), 1 on a crash.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from typing import TypeVar

from gradacc.db import session_scope
from gradacc.jobs import add_event, transition_job
from gradacc.models import Job, JobStatus, utcnow
from gradacc.settings import Settings, get_settings
from trainer_core.callbacks import TrainResult
from trainer_core.errors import JobError
from trainer_core.spec import JobSpec
from worker.reporting import (
    DATABASE_ERRORS,
    DatabaseCallback,
    StopPoller,
    describe_error,
    jsonable,
)
from worker.supervisor import EXIT_PREEMPTED
from worker.training import run_training

T = TypeVar("T")


def main(argv: list[str]) -> int:
    (job_id,) = argv
    settings = get_settings()
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.RUNNING:
            return 0
        spec = JobSpec.model_validate(job.spec)
    # Writes a database outage held back, kept on disk by an earlier attempt, go out first.
    journal = settings.jobs_dir / job_id / "pending_writes.jsonl"
    callback = DatabaseCallback(settings, job_id, journal=journal)
    try:
        result = run_training(
            spec,
            settings.jobs_dir / job_id,
            callback=callback,
            should_stop=StopPoller(settings, job_id),
            threads=settings.train_threads,
        )
    except JobError as exc:
        code, message = exc.code, exc.message
        callback.flush()
        _retrying(lambda: _record_failure(settings, job_id, code=code, message=message))
        return 0
    except Exception as exc:
        traceback.print_exc()  # into the job's train.log, not into the database
        callback.flush()
        message = describe_error(exc)
        _retrying(lambda: _record_failure(settings, job_id, code="training_error", message=message))
        return 1
    callback.flush()  # metrics that waited out a database outage go in before the final status
    return _retrying(lambda: _record_result(settings, job_id, result))


def _retrying(write: Callable[[], T], timeout_s: float = 300.0) -> T:
    """The final status must not be lost to a database blip: retry it with backoff."""
    deadline, delay = time.monotonic() + timeout_s, 0.5
    while True:
        try:
            return write()
        except DATABASE_ERRORS:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def _record_failure(settings: Settings, job_id: str, *, code: str, message: str) -> None:
    with session_scope(settings) as session:
        if transition_job(
            session,
            job_id=job_id,
            to=JobStatus.FAILED,
            finished_at=utcnow(),
            error_code=code,
            error_message=message,
        ):
            add_event(session, job_id=job_id, kind="failed", message=f"{code}: {message}")
        session.commit()


def _record_result(settings: Settings, job_id: str, result: TrainResult) -> int:
    with session_scope(settings) as session:
        if result.status == "preempted":
            add_event(session, job_id=job_id, kind="preempted", message="checkpoint kept")
            session.commit()
            return EXIT_PREEMPTED
        target = JobStatus.SUCCEEDED if result.status == "completed" else JobStatus.CANCELLED
        summary = jsonable(result.summary)
        if transition_job(session, job_id=job_id, to=target, finished_at=utcnow(), summary=summary):
            add_event(session, job_id=job_id, kind=str(target), message=f"training {target}")
        session.commit()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
