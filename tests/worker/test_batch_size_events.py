"""The micro-batch in force reaches the job: every choice and change is a job event, and the job
object shows the current micro-batch and K (what the API returns)."""

from __future__ import annotations

from sqlalchemy import select

from api.schemas.jobs import JobRead
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job, JobEvent, JobStatus
from tests.support import make_job
from worker.child.reporting import DatabaseCallback


def test_batch_size_reports_become_events_and_current_values(db_settings: Settings) -> None:
    job_id = make_job(db_settings, status=JobStatus.RUNNING)
    callback = DatabaseCallback(db_settings, job_id)
    callback.on_batch_size(
        {"micro_batch_size": 8, "gradient_accumulation_steps": 2, "effective_batch_size": 16,
         "reason": "probe", "budget_bytes": 1000, "tried": [1, 2, 4, 8, 16]}
    )  # fmt: skip
    callback.on_batch_size(
        {"micro_batch_size": 4, "gradient_accumulation_steps": 4, "effective_batch_size": 16,
         "reason": "out_of_memory", "tried": [8, 4]}
    )  # fmt: skip
    assert callback.flush(timeout_s=10)
    with session_scope(db_settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        shown = JobRead.of(job)
        assert (shown.micro_batch_size, shown.gradient_accumulation_steps) == (4, 4)
        messages = session.scalars(
            select(JobEvent.message).where(JobEvent.job_id == job_id, JobEvent.kind == "batch_size")
        ).all()
    assert len(messages) == 2
    assert "micro-batch 8 x K 2 = effective batch 16" in messages[0]
    assert "largest that fits 1,000 bytes" in messages[0]
    assert "out of memory; sizes tried: [8, 4]" in messages[1]
