"""The worker checks a job's spec again before training: a local path outside its data roots
fails the job at once (no training process, no retry), on each database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.models import Job, JobEvent
from gradacc.settings import Settings, get_settings
from tests.worker.test_job_states import make_job
from worker.tasks import run_job


@pytest.fixture
def worker_settings(db_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """The task reads ``get_settings()`` as a worker would: point the environment at this db."""
    monkeypatch.setenv("GRADACC_HOME", str(db_settings.home))
    if db_settings.database_url:
        monkeypatch.setenv("GRADACC_DATABASE_URL", db_settings.database_url)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


def test_a_path_outside_the_roots_fails_before_training(
    worker_settings: Settings, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere.csv"
    outside.write_text("text,label\nhi,1\n")
    spec = {"model": "builtin:tiny-bert", "dataset": str(outside)}
    job_id = make_job(worker_settings, spec=spec)
    assert run_job(job_id) == "failed"
    with session_scope(worker_settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.status, job.error_code, job.attempts) == ("failed", "invalid_request", 1)
        assert job.error_message is not None and "data roots" in job.error_message
        assert str(outside) not in job.error_message  # no filesystem layout in the message
        assert job.pid is None  # no training process was started
        kinds = session.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id)).all()
    assert list(kinds) == ["failed"]
    assert run_job(job_id) == "skipped"  # a redelivery does not retry it
