"""What a training process does once it has a spec, for a one-process job and for rank 0 of several:
train, then record the outcome (the final status, the result file, a failure) so that no blip of
the database loses it. ``worker.child.entry`` and ``worker.child.ranks.main`` both call it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from gradacc.db import DATABASE_ERRORS, session_scope
from gradacc.jobs.records import add_event
from gradacc.jobs.states import fail_job, transition_job
from gradacc.openai.results import write_results
from gradacc.outputs import outputs
from gradacc.retry import retry
from gradacc.scheduling.preemption import preemptor_shown
from gradacc.settings import Settings
from gradacc.sources.files import resolve_file_sources
from gradacc.tables import Job, JobStatus, utcnow
from trainer_core.spec.callbacks import TrainResult
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import WORKER_JOURNAL
from trainer_core.spec.replan import RanksReplan
from worker import exit_codes
from worker.child.reporting import (
    DatabaseCallback,
    describe_error,
    jsonable,
    without_server_paths,
)
from worker.child.stop import DatabaseStopCheck
from worker.child.training import run_training

T = TypeVar("T")
log = logging.getLogger(__name__)


def fail_early(settings: Settings, job_id: str, exc: JobError) -> int:
    log.error("job %s failed: %s: %s", job_id, exc.code, exc.message)
    _retrying(lambda: _record_failure(settings, job_id, exc.code, exc.message, param=exc.param))
    return exit_codes.OUTCOME_RECORDED


def train_and_record(settings: Settings, job_id: str, spec: JobSpec) -> int:
    """Train (a one-process job, or rank 0 of several) and record the outcome; exit status."""
    # Writes a database outage held back, kept on disk by an earlier attempt, go out first.
    journal = settings.jobs_dir / job_id / WORKER_JOURNAL
    callback = DatabaseCallback(settings, job_id, journal=journal)
    try:
        result = run_training(
            spec,
            settings,
            job_id,
            callback=callback,
            should_stop=DatabaseStopCheck(settings, job_id),
        )
    except RanksReplan:  # a rank of several ran out of memory: the launcher restarts them all
        callback.flush()
        raise
    except JobError as exc:
        log.error("job %s failed: %s: %s", job_id, exc.code, exc.message)
        code, message, param = exc.code, exc.message, exc.param
        callback.flush()
        _retrying(lambda: _record_failure(settings, job_id, code, message, param=param))
        return exit_codes.OUTCOME_RECORDED
    except Exception as exc:
        log.exception("job %s crashed", job_id)  # into train.log, not into the database
        callback.flush()
        if spec.num_processes > 1:  # often a peer rank's death (a collective failed): the
            raise  # launcher starts every rank again, or fails the job past max_restarts
        message = describe_error(exc)
        _retrying(lambda: _record_failure(settings, job_id, "training_error", message))
        return exit_codes.CRASHED
    callback.flush()  # metrics that waited out a database outage go in before the final status
    return _retrying(lambda: _record_result(settings, job_id, result))


def running_spec(settings: Settings, job_id: str) -> JobSpec | None:
    """The job's spec with uploaded files as local paths; None when the job is not running."""
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.RUNNING:
            return None
        return resolve_file_sources(session, settings, job=job)


def _retrying(write: Callable[[], T]) -> T:
    """The final status must not be lost to a database blip: retry it with backoff."""
    return retry(write, errors=DATABASE_ERRORS, timeout_s=300.0)


def _record_failure(
    settings: Settings, job_id: str, code: str, message: str, *, param: str | None = None
) -> None:
    message = without_server_paths(message, settings)  # the error and its "failed" event
    with session_scope(settings) as session:
        if fail_job(session, job_id=job_id, code=code, message=message) and param is not None:
            job = session.get(Job, job_id)
            if job is not None and job.fine_tuning is not None:  # its error object has a param
                job.fine_tuning = {**job.fine_tuning, "error_param": param}
        session.commit()


def _record_result(settings: Settings, job_id: str, result: TrainResult) -> int:
    with session_scope(settings) as session:
        if result.status == "preempted":
            job = session.get(Job, job_id)
            by = job.preempted_by if job is not None else None  # a job of higher priority
            if by is not None:  # another tenant's job stays unnamed
                by = preemptor_shown(session, victim=job_id, preemptor=by)
            message = f"preempted by {by}: checkpoint kept" if by else "checkpoint kept"
            add_event(session, job_id=job_id, kind="preempted", message=message)
            session.commit()
            return exit_codes.PREEMPTED
        target = JobStatus.SUCCEEDED if result.status == "completed" else JobStatus.CANCELLED
        summary = jsonable(result.summary)
        sizes = outputs(settings.jobs_dir / job_id)
        done = {"finished_at": utcnow(), "summary": summary, "outputs": sizes}
        if transition_job(session, job_id=job_id, to=target, **done):
            add_event(session, job_id=job_id, kind=str(target), message=f"training {target}")
            job = session.get(Job, job_id)
            if target == JobStatus.SUCCEEDED and job is not None and job.api is not None:
                write_results(session, settings, job=job)  # the fine-tuning API's result file
        session.commit()
    return exit_codes.OUTCOME_RECORDED
