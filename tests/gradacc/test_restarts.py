"""``gradacc.jobs.restarts``: a restart is an event naming its cause, up to the spec's
``max_restarts``; past it the job fails naming every cause; a job no longer running (or another
worker's) is left alone."""

from __future__ import annotations

import json

from gradacc.db import session_scope
from gradacc.jobs.restarts import restart_or_fail
from gradacc.settings import Settings
from gradacc.tables import Job, JobEvent, JobStatus
from tests.support import JOB_SPEC, make_job


def kinds(settings: Settings, job_id: str) -> list[tuple[str, str]]:
    with session_scope(settings) as session:
        events = session.query(JobEvent).filter_by(job_id=job_id).order_by(JobEvent.id).all()
        return [(e.kind, e.message) for e in events]


def test_restarts_are_counted_and_the_last_one_fails_naming_every_cause(
    embedded_settings: Settings,
) -> None:
    settings = embedded_settings
    spec = {**JOB_SPEC, "max_restarts": 2}
    job_id = make_job(settings, status=JobStatus.RUNNING, worker="w1", spec=spec)
    checkpoint = settings.jobs_dir / job_id / "checkpoint"
    checkpoint.mkdir(parents=True)
    (checkpoint / "gradacc_state.json").write_text(json.dumps({"global_step": 7}))

    assert restart_or_fail(settings, job_id, cause="rank 1 of 2 killed by SIGKILL")
    assert restart_or_fail(settings, job_id, cause="rank 0 of 2 exited with status 1 (boom)")
    assert not restart_or_fail(settings, job_id, cause="rank 1 of 2 killed by SIGKILL")

    restarted = [m for k, m in kinds(settings, job_id) if k == "restarted"]
    assert restarted == [
        "restart 1 of 2: rank 1 of 2 killed by SIGKILL; resumes from step 7",
        "restart 2 of 2: rank 0 of 2 exited with status 1 (boom); resumes from step 7",
    ]
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.status, job.error_code) == (JobStatus.FAILED, "restarts_exhausted")
        assert job.error_message == (
            "died 3 times, past max_restarts=2: (1) rank 1 of 2 killed by SIGKILL; "
            "(2) rank 0 of 2 exited with status 1 (boom); (3) rank 1 of 2 killed by SIGKILL"
        )


def test_no_restart_for_a_job_that_is_not_running_or_not_ours(embedded_settings: Settings) -> None:
    settings = embedded_settings
    cancelled = make_job(settings, status=JobStatus.CANCELLED)
    assert not restart_or_fail(settings, cancelled, cause="x")
    elsewhere = make_job(settings, status=JobStatus.RUNNING, worker="w2")
    assert not restart_or_fail(settings, elsewhere, cause="x", owned_by="w1")
    assert kinds(settings, elsewhere) == []
    fresh = make_job(settings, status=JobStatus.RUNNING, worker="w1")  # default max_restarts 3
    assert restart_or_fail(settings, fresh, cause="x", owned_by="w1")
    assert kinds(settings, fresh) == [
        ("restarted", "restart 1 of 3: x; starts over (no checkpoint yet)")
    ]
