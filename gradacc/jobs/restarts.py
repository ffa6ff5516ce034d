"""Restarts that lose nothing: when a process of a running job dies (kill -9, the OOM killer, a
rank that crashed), the job starts again from its last checkpoint, up to the spec's
``max_restarts`` times (default 3). Each restart is a ``restarted`` event naming its cause; past
the limit the job fails with ``restarts_exhausted``, naming every cause.

The count is the job's ``restarted`` events, so it survives the worker: a job taken over by
another worker keeps the restarts it used. A one-process job restarts through the queue (its
heartbeat is made stale: ``worker.consumer.supervisor``); the ranks of a multi-process job
restart in place, on the devices the job holds (``worker.child.ranks.launcher``).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.jobs.records import add_event
from gradacc.jobs.states import fail_job
from gradacc.settings import Settings
from gradacc.tables import Job, JobEvent, JobStatus
from trainer_core.spec.outputs import kept_checkpoints

EVENT = "restarted"
DEFAULT_MAX_RESTARTS = 3


def resume_point(job_dir: Path) -> str:
    """Where a restart resumes: the latest complete checkpoint's step, or the start."""
    kept = kept_checkpoints(job_dir)
    return f"resumes from step {kept[0][0]}" if kept else "starts over (no checkpoint yet)"


def restart_or_fail(
    settings: Settings, job_id: str, *, cause: str, owned_by: str | None = None
) -> bool:
    """After a process of the running job ``job_id`` died of ``cause``: record a restart and
    return True, or, past ``max_restarts``, fail the job naming every cause and return False.
    False too when the job is no longer running (cancelled, deleted, taken over). Commits."""
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.RUNNING:
            return False
        if owned_by is not None and job.worker != owned_by:
            return False
        limit = int(job.spec.get("max_restarts", DEFAULT_MAX_RESTARTS))
        earlier = session.scalars(
            select(JobEvent.message)
            .where(JobEvent.job_id == job_id, JobEvent.kind == EVENT)
            .order_by(JobEvent.id)
        ).all()
        where = resume_point(settings.jobs_dir / job_id)
        if len(earlier) >= limit:
            causes = [*(m.partition(": ")[2].rpartition("; ")[0] for m in earlier), cause]
            listed = "; ".join(f"({i}) {c}" for i, c in enumerate(causes, start=1))
            message = f"died {len(causes)} times, past max_restarts={limit}: {listed}"
            fail_job(session, job_id=job_id, code="restarts_exhausted", message=message)
            session.commit()
            return False
        message = f"restart {len(earlier) + 1} of {limit}: {cause}; {where}"
        add_event(session, job_id=job_id, kind=EVENT, message=message)
        session.commit()
        return True
