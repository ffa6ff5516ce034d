"""1,000 concurrent POST /v1/jobs against a real uvicorn (2 processes) on PostgreSQL and Redis,
most repeating an Idempotency-Key (with the same body, or another one): exactly one job per key
plus one per keyless POST is created and enqueued. Then two real workers run the whole queue:
every job trains exactly once (one claim, one "started" event, one metrics row)."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import func, select, text

from gradacc.db import get_engine, session_scope
from gradacc.settings import Settings
from gradacc.tables import EpochMetric, Job, JobEvent
from tests.conftest import ROOT, TINY, unique_queue
from tests.e2e.conftest import WorkerProcess, forget_queue, settings_env
from tests.support import free_port, wait_ready

pytestmark = pytest.mark.integration

# Every job made here is trained once at the end (most of the file's CPU): 20 jobs from 1,225
# POSTs (it was 80, then 40; the races per key are the point, not the number of jobs).
KEYS = 10  # each POSTed 90-110 times with one body; a third of them once more with another body
KEYLESS = 5
QUEUED_LIMIT = 20  # above the 15 jobs of the first burst; a second burst of 200 hits it
# The smallest real job: two optimizer steps, an evaluation, a checkpoint and the final model.
SMALL = {**TINY, "max_train_samples": 32, "max_eval_samples": 16}


@pytest.fixture
def server(pg_url: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[str, Settings]]:
    settings = Settings(
        home=tmp_path, database_url=pg_url, broker_url=redis_url, queue=unique_queue()
    )
    with get_engine(pg_url).begin() as connection:
        connection.execute(text("TRUNCATE jobs CASCADE"))
    port = free_port()
    env = settings_env(settings) | {"GRADACC_MAX_QUEUED_PER_TENANT": str(QUEUED_LIMIT)}
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "api.main:app",
        "--port",
        str(port),
        "--workers",
        "2",
    ]
    with (tmp_path / "uvicorn.log").open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=2) as probe:
            wait_ready(probe, timeout_s=30, workers=False)
        yield base, settings
    finally:
        process.terminate()
        process.wait(timeout=20)
        forget_queue(redis_url, settings.queue)
        # Queued jobs left behind would be re-sent by a later test's reconciler.
        with get_engine(pg_url).begin() as connection:
            connection.execute(text("TRUNCATE jobs CASCADE"))


def requests_to_send() -> list[tuple[str | None, dict[str, Any]]]:
    rng = random.Random(5)
    sent: list[tuple[str | None, dict[str, Any]]] = []
    for i in range(KEYS):
        sent += [(f"key-{i}", SMALL)] * rng.randint(90, 110)
        if i % 3 == 0:
            sent.append((f"key-{i}", {**SMALL, "seed": 7}))
    sent += [(None, SMALL)] * KEYLESS
    rng.shuffle(sent)
    return sent


def test_concurrent_posts_create_one_job_per_key(server: tuple[str, Settings]) -> None:
    base, settings = server
    sent = requests_to_send()
    assert len(sent) >= 1000
    with httpx.Client(base_url=base, timeout=60, limits=httpx.Limits(max_connections=32)) as http:

        def post(item: tuple[str | None, dict[str, Any]]) -> tuple[int, dict[str, Any]]:
            key, spec = item
            headers = {"Idempotency-Key": key} if key else {}
            response = http.post("/v1/jobs", json=spec, headers=headers)
            return response.status_code, response.json()

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=32) as pool:
            answers = list(pool.map(post, sent))
        elapsed = time.monotonic() - started
    statuses = [status for status, _ in answers]
    assert set(statuses) <= {200, 201, 409}, sorted(set(statuses))
    by_key: dict[str, list[tuple[int, dict[str, Any], dict[str, Any]]]] = defaultdict(list)
    for (key, spec), (status, answer) in zip(sent, answers, strict=True):
        if key is not None:
            by_key[key].append((status, answer, spec))
    for key, outcomes in by_key.items():
        created = [answer for status, answer, _ in outcomes if status == 201]
        assert len(created) == 1, (key, [s for s, _, _ in outcomes])
        winner = created[0]
        for status, answer, spec in outcomes:
            if spec.get("seed", 42) == winner["spec"]["seed"]:
                assert status in (200, 201) and answer["id"] == winner["id"], key
            else:
                assert status == 409 and answer["error"]["code"] == "idempotency_conflict", key
    expected = KEYS + KEYLESS
    assert statuses.count(201) == expected
    with session_scope(settings) as session:
        assert session.scalar(select(func.count()).select_from(Job)) == expected
    queue_length = redis.Redis.from_url(settings.resolved_broker_url()).llen(settings.queue)
    assert queue_length == expected
    print(f"{len(sent)} POSTs in {elapsed:.1f} s: {expected} jobs, {queue_length} enqueued")
    # The per-tenant queued limit holds under concurrency, across both server processes.
    limits = httpx.Limits(max_connections=32)
    with (
        httpx.Client(base_url=base, timeout=60, limits=limits) as http,
        ThreadPoolExecutor(max_workers=32) as pool,
    ):
        burst = list(pool.map(lambda _: http.post("/v1/jobs", json=SMALL), range(200)))
    codes = [response.status_code for response in burst]
    assert codes.count(201) == QUEUED_LIMIT - expected and codes.count(429) == 200 - codes.count(
        201
    )
    assert {r.json()["error"]["code"] for r in burst if r.status_code == 429} == {"too_many_jobs"}
    with session_scope(settings) as session:
        assert session.scalar(select(func.count()).select_from(Job)) == QUEUED_LIMIT
    run_every_job_once(settings)


def run_every_job_once(settings: Settings) -> None:
    """Two workers drain the queue; each job is claimed, started and finished exactly once."""
    started = time.monotonic()
    workers = [WorkerProcess(settings, f"drain-{n}") for n in (1, 2)]
    try:
        deadline = started + 240
        while time.monotonic() < deadline:
            with session_scope(settings) as session:
                query = select(func.count()).where(Job.status.in_(["queued", "running"]))
                if session.scalar(query) == 0:
                    break
            time.sleep(1)
        elapsed = time.monotonic() - started
    finally:
        for worker in workers:
            worker.stop()
    with session_scope(settings) as session:
        rows = session.execute(
            select(Job.status, Job.attempts, func.count()).group_by(Job.status, Job.attempts)
        ).all()
        started_events = session.execute(
            select(JobEvent.job_id, func.count())
            .where(JobEvent.kind == "started")
            .group_by(JobEvent.job_id)
        ).all()
        metric_rows = session.scalar(select(func.count()).select_from(EpochMetric))
        by_worker = dict(
            session.execute(select(Job.worker, func.count()).group_by(Job.worker)).all()
        )
    assert rows == [("succeeded", 1, QUEUED_LIMIT)], (rows, workers[0].log())
    assert len(started_events) == QUEUED_LIMIT and {n for _, n in started_events} == {1}
    assert metric_rows == QUEUED_LIMIT  # one epoch each, written once
    assert len(by_worker) == 2, by_worker  # both workers took a share
    print(f"{QUEUED_LIMIT} jobs run once each in {elapsed:.0f} s by 2 workers: {by_worker}")
