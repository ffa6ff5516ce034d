"""The training process for one job: ``main([job_id])``, in a process forked from the worker's
fork server (``worker.fork_server.child``), or ``python -m worker.child.entry JOB_ID`` (cold).

Exit status (``worker.exit_codes``): OUTCOME_RECORDED, PREEMPTED (checkpoint kept), or CRASHED.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import TypeVar

from gradacc.db import DATABASE_ERRORS, session_scope
from gradacc.jobs import add_event, transition_job
from gradacc.models import Job, JobStatus, utcnow
from gradacc.retry import retry
from gradacc.settings import Settings, get_settings
from trainer_core.callbacks import TrainResult
from trainer_core.errors import JobError
from trainer_core.spec import JobSpec
from worker import exit_codes
from worker.child.reporting import DatabaseCallback, describe_error, jsonable
from worker.child.stop import StopPoller
from worker.child.training import run_training

T = TypeVar("T")


def main(argv: list[str]) -> int:
    (job_id,) = argv
    settings = get_settings()
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.RUNNING:
            return exit_codes.OUTCOME_RECORDED  # not ours to train (any more)
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
            data_cache_dir=settings.data_cache_dir,
            data_cache_max_bytes=settings.data_cache_max_bytes,
            loader_workers=settings.loader_workers,
        )
    except JobError as exc:
        code, message = exc.code, exc.message
        callback.flush()
        _retrying(lambda: _record_failure(settings, job_id, code=code, message=message))
        return exit_codes.OUTCOME_RECORDED
    except Exception as exc:
        traceback.print_exc()  # into the job's train.log, not into the database
        callback.flush()
        message = describe_error(exc)
        _retrying(lambda: _record_failure(settings, job_id, code="training_error", message=message))
        return exit_codes.CRASHED
    callback.flush()  # metrics that waited out a database outage go in before the final status
    return _retrying(lambda: _record_result(settings, job_id, result))


def _retrying(write: Callable[[], T]) -> T:
    """The final status must not be lost to a database blip: retry it with backoff."""
    return retry(write, errors=DATABASE_ERRORS, timeout_s=300.0)


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
            return exit_codes.PREEMPTED
        target = JobStatus.SUCCEEDED if result.status == "completed" else JobStatus.CANCELLED
        summary = jsonable(result.summary)
        if transition_job(session, job_id=job_id, to=target, finished_at=utcnow(), summary=summary):
            add_event(session, job_id=job_id, kind=str(target), message=f"training {target}")
        session.commit()
    return exit_codes.OUTCOME_RECORDED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
