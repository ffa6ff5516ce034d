"""Tenants end to end on PostgreSQL + Redis with two real workers: API keys on, a tenant limited
to one running job never has two running (the other waits and runs after), and a job whose local
path escapes the data roots (written straight into the database, past the API) is failed by the
worker before any training process starts."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.main import create_app
from gradacc.auth import create_api_key
from gradacc.db import get_engine, session_scope
from gradacc.jobs.states import new_job_id
from gradacc.scheduling.queue import create_celery_app, enqueue_job
from gradacc.settings import Settings
from gradacc.tables import Job, utcnow
from tests.conftest import TINY
from tests.e2e.conftest import WorkerProcess
from tests.support import event_kinds, wait_final

pytestmark = pytest.mark.integration


@pytest.fixture
def authed(pg_redis_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("GRADACC_MAX_RUNNING_PER_TENANT", "1")  # read by the workers started here
    # Queued jobs left by earlier tests would be re-sent by these workers' reconcilers.
    with get_engine(pg_redis_settings.resolved_database_url()).begin() as connection:
        connection.execute(text("TRUNCATE jobs CASCADE"))
    settings = pg_redis_settings.model_copy(update={"require_auth": True})
    with TestClient(create_app(settings)) as client:
        yield client


def test_running_limit_and_worker_path_check(
    authed: TestClient,
    pg_redis_settings: Settings,
    start_worker: Callable[[str], WorkerProcess],
) -> None:
    settings = pg_redis_settings
    with session_scope(settings) as session:
        alice = {"Authorization": f"Bearer {create_api_key(session, tenant='alice')}"}
        bob = {"Authorization": f"Bearer {create_api_key(session, tenant='bob')}"}
    first = authed.post("/v1/jobs", json=TINY, headers=alice).json()["id"]
    second = authed.post("/v1/jobs", json={**TINY, "seed": 1}, headers=alice).json()["id"]
    escaped = new_job_id()
    with session_scope(settings) as session:
        spec = {**TINY, "dataset": "/etc/passwd"}
        session.add(
            Job(id=escaped, tenant="bob", spec=spec, effective_batch_size=16, enqueued_at=utcnow())
        )
        session.commit()
    enqueue_job(create_celery_app(settings), settings, escaped)
    start_worker("w1")
    start_worker("w2")
    jobs = [wait_final(authed, job_id, 120, headers=alice) for job_id in (first, second)]
    assert [job["status"] for job in jobs] == ["succeeded", "succeeded"], jobs
    assert [job["attempts"] for job in jobs] == [1, 1]
    earlier, later = sorted(jobs, key=lambda job: job["started_at"])
    assert later["started_at"] >= earlier["finished_at"], "two of alice's jobs ran at once"
    assert authed.get(f"/v1/jobs/{escaped}", headers=alice).status_code == 404
    bad = wait_final(authed, escaped, 30, headers=bob)
    assert bad["status"] == "failed" and bad["error"]["code"] == "invalid_request", bad
    assert bad["attempts"] == 1 and "data roots" in bad["error"]["message"]
    assert not (settings.jobs_dir / escaped).exists(), "no training process for a refused job"
    assert event_kinds(authed, escaped, headers=bob) == ["failed"]
    print(
        "throttled events:",
        [event_kinds(authed, j, headers=alice).count("throttled") for j in (first, second)],
    )
