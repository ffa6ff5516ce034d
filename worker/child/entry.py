"""The training process for one job: ``main([job_id])``, in a process forked from the worker's
fork server (``worker.fork_server.child``), or ``python -m worker.child.entry JOB_ID`` (cold).

Exit status (``worker.exit_codes``): OUTCOME_RECORDED, PREEMPTED (checkpoint kept), or CRASHED.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TypeVar

from gradacc.db import DATABASE_ERRORS, session_scope
from gradacc.files import resolve_file_sources
from gradacc.gang import node_of
from gradacc.jobs import add_event, fail_job, transition_job
from gradacc.models import Job, JobStatus, utcnow
from gradacc.result_files import write_results
from gradacc.retry import retry
from gradacc.settings import Settings, get_settings
from trainer_core.loop.replan import RanksReplan
from trainer_core.spec.callbacks import TrainResult
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import WORKER_JOURNAL
from worker import exit_codes
from worker.child.logs import configure_job_logging
from worker.child.rank_launcher import Rendezvous, launch_ranks
from worker.child.reporting import DatabaseCallback, describe_error, jsonable
from worker.child.stop import DatabaseStopCheck
from worker.child.training import run_training

T = TypeVar("T")
log = logging.getLogger(__name__)


def main(argv: list[str]) -> int:
    (job_id,) = argv
    configure_job_logging()
    settings = get_settings()
    try:
        spec = running_spec(settings, job_id)
    except JobError as exc:  # an uploaded file it names is gone
        return fail_early(settings, job_id, exc)
    if spec is None:  # not ours to train (any more); paused before it began: nothing to keep
        return exit_codes.PREEMPTED if _paused(settings, job_id) else exit_codes.OUTCOME_RECORDED
    if spec.num_machines > 1:
        rendezvous = _rendezvous(settings, job_id)
        if rendezvous is None:  # this machine's slot is gone: the gang was released or taken over
            return exit_codes.OUTCOME_RECORDED
        return launch_ranks(settings, job_id, spec.processes_per_machine, rendezvous)
    if spec.num_processes > 1:
        return launch_ranks(settings, job_id, spec.num_processes)
    return train_and_record(settings, job_id, spec)


def _rendezvous(settings: Settings, job_id: str) -> Rendezvous | None:
    """This machine's node of the job's gang (``gradacc.gang``), as torchrun's rendezvous."""
    with session_scope(settings) as session:
        node = node_of(session, job_id=job_id, machine=settings.machine)
    if node is None:
        return None
    endpoint = f"{node.endpoint_host}:{node.port}"
    return Rendezvous(node.num_machines, node.node_rank, endpoint, local_addr=node.host)


def fail_early(settings: Settings, job_id: str, exc: JobError) -> int:
    log.error("job %s failed: %s: %s", job_id, exc.code, exc.message)
    code, message = exc.code, exc.message
    _retrying(lambda: _record_failure(settings, job_id, code=code, message=message))
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
        code, message = exc.code, exc.message
        callback.flush()
        _retrying(lambda: _record_failure(settings, job_id, code=code, message=message))
        return exit_codes.OUTCOME_RECORDED
    except Exception as exc:
        log.exception("job %s crashed", job_id)  # into train.log, not into the database
        callback.flush()
        if spec.num_processes > 1:  # often a peer rank's death (a collective failed): the
            raise  # launcher starts every rank again, or fails the job past max_restarts
        message = describe_error(exc)
        _retrying(lambda: _record_failure(settings, job_id, code="training_error", message=message))
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


def _paused(settings: Settings, job_id: str) -> bool:
    """Paused between its claim and here: a preemption with nothing trained (the attempt is not
    counted as a failure)."""
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.PAUSED:
            return False
        add_event(session, job_id=job_id, kind="preempted", message="paused before it began")
        session.commit()
        return True


def _retrying(write: Callable[[], T]) -> T:
    """The final status must not be lost to a database blip: retry it with backoff."""
    return retry(write, errors=DATABASE_ERRORS, timeout_s=300.0)


def _record_failure(settings: Settings, job_id: str, *, code: str, message: str) -> None:
    with session_scope(settings) as session:
        fail_job(session, job_id=job_id, code=code, message=message)
        session.commit()


def _record_result(settings: Settings, job_id: str, result: TrainResult) -> int:
    with session_scope(settings) as session:
        if result.status == "preempted":
            job = session.get(Job, job_id)
            by = job.preempted_by if job is not None else None  # a job of higher priority
            message = f"preempted by {by}: checkpoint kept" if by else "checkpoint kept"
            add_event(session, job_id=job_id, kind="preempted", message=message)
            session.commit()
            return exit_codes.PREEMPTED
        target = JobStatus.SUCCEEDED if result.status == "completed" else JobStatus.CANCELLED
        summary = jsonable(result.summary)
        if transition_job(session, job_id=job_id, to=target, finished_at=utcnow(), summary=summary):
            add_event(session, job_id=job_id, kind=str(target), message=f"training {target}")
            job = session.get(Job, job_id)
            if target == JobStatus.SUCCEEDED and job is not None and job.api is not None:
                write_results(session, settings, job=job)  # the fine-tuning API's result file
        session.commit()
    return exit_codes.OUTCOME_RECORDED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
