"""The wall-clock limit of a run (``GRADACC_MAX_JOB_SECONDS``; 0: none).

The supervisor of a job's node 0 (``worker.consumer.supervisor``) starts the clock when it
starts the training process. Past the limit it asks the process to preempt itself (SIGUSR1: a
checkpoint at the next window boundary, or at once when held); once the process has exited, the
job fails with ``time_limit`` and keeps its checkpoint. A job asked meanwhile to pause, or to
make way for a job of higher priority, goes that way instead. The limit is per run: a job
preempted by priority and resumed starts a new clock.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradacc.db import DATABASE_ERRORS, session_scope
from gradacc.jobs.records import add_event
from gradacc.jobs.states import fail_job
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus
from trainer_core.spec.outputs import kept_checkpoints

log = logging.getLogger(__name__)

TIME_LIMIT = "time_limit"  # why the supervisor stopped the process, and the job's error code


class TimeLimit:
    """The clock of one run; ``asked`` once the limit was reached and the stop was asked."""

    def __init__(self, settings: Settings, job_id: str) -> None:
        self.settings, self.job_id = settings, job_id
        self.started = time.monotonic()
        self.asked = False

    def reached(self) -> bool:
        """True once, when the run passes the limit (its "time_limit" event written then)."""
        limit = self.settings.max_job_seconds
        if self.asked or not limit or time.monotonic() - self.started < limit:
            return False
        self.asked = True
        message = f"ran longer than GRADACC_MAX_JOB_SECONDS ({limit:g} s): stopping at a checkpoint"
        log.warning("job %s %s", self.job_id, message)
        try:
            with session_scope(self.settings) as session:
                add_event(session, job_id=self.job_id, kind=TIME_LIMIT, message=message)
                session.commit()
        except DATABASE_ERRORS:
            log.warning("job %s: its time_limit event could not be written", self.job_id)
        return True


def fail_timed_out(session: Session, *, settings: Settings, job_id: str, worker: str) -> bool:
    """The process stopped at its checkpoint after the limit: the job fails with ``time_limit``
    (False, nothing written, when it is not a running job of this worker's any more, or a pause
    took it meanwhile). Does not commit."""
    status = session.scalar(select(Job.status).where(Job.id == job_id))
    if status != JobStatus.RUNNING:
        return False
    kept = kept_checkpoints(settings.jobs_dir / job_id)
    where = f"its checkpoint of step {kept[0][0]} is kept" if kept else "no checkpoint was written"
    message = f"ran longer than GRADACC_MAX_JOB_SECONDS ({settings.max_job_seconds:g} s); {where}"
    return fail_job(session, job_id=job_id, code=TIME_LIMIT, message=message, owned_by=worker)
