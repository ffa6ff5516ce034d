"""The training process's writes survive a PostgreSQL outage: training goes on, metrics and
events wait (in memory and in a journal on disk) and are all written, in order, once the database answers again. The
outage is a cuttable TCP proxy in front of the test database (the server itself keeps running)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select

from gradacc.db import get_engine, session_scope
from gradacc.jobs.states import new_job_id
from gradacc.settings import Settings
from gradacc.tables import EpochMetric, Job, JobEvent, JobStatus, utcnow
from tests.worker.tcp_proxy import CuttableProxy
from worker.child import reporting
from worker.child.reporting import DatabaseCallback
from worker.child.stop import DatabaseStopCheck


@pytest.fixture
def proxied(pg_url: str, tmp_path: Path) -> Iterator[tuple[Settings, CuttableProxy]]:
    parts = urlsplit(pg_url)
    proxy = CuttableProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    url = pg_url.replace(parts.netloc, f"{parts.username}@127.0.0.1:{proxy.port}", 1)
    try:
        yield Settings(home=tmp_path, database_url=url), proxy
    finally:
        proxy.close()
        get_engine(url).dispose()


def record(epoch: int) -> dict[str, float | int]:
    return {
        "epoch": epoch,
        "train_loss": 1.0 / epoch,
        "eval_loss": 2.0 / epoch,
        "optimizer_steps": 4 * epoch,
    }


def test_writes_wait_out_an_outage_and_none_is_lost(
    proxied: tuple[Settings, CuttableProxy], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, proxy = proxied
    direct = Settings(home=settings.home, database_url=pg_url)
    job_id = running_job(direct)
    monkeypatch.setattr(reporting, "RETRY_MAX_S", 0.2)  # retry quickly in a test
    callback = DatabaseCallback(settings, job_id)
    should_stop = DatabaseStopCheck(settings, job_id)
    callback.on_start({"total_steps": 12, "num_train_samples": 48, "effective_batch_size": 4})
    callback.on_epoch_end(record(1))
    proxy.cut()
    callback.on_progress({"epoch": 1, "step": 5, "total_steps": 12})  # dropped, no exception
    callback.on_epoch_end(record(2))  # waits in memory
    callback.on_checkpoint({"epoch": 2, "step": 8})
    assert should_stop() is None  # the poller keeps training through the outage
    with session_scope(direct) as session:
        assert [
            m.epoch
            for m in session.scalars(select(EpochMetric).where(EpochMetric.job_id == job_id))
        ] == [1]
    proxy.restore()
    time.sleep(0.3)
    callback.on_epoch_end(record(3))  # the first write that gets through takes the backlog along
    assert callback.flush(timeout_s=10)
    with session_scope(direct) as session:
        epochs = session.scalars(
            select(EpochMetric.epoch)
            .where(EpochMetric.job_id == job_id)
            .order_by(EpochMetric.epoch)
        )
        assert list(epochs) == [1, 2, 3]
        kinds = session.scalars(
            select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
        )
        assert list(kinds) == ["training", "epoch", "epoch", "checkpoint", "epoch"]
        job = session.get(Job, job_id)
        assert job is not None and job.epoch == 3 and job.latest_metrics == record(3)


def test_writes_held_back_survive_the_process_that_held_them(
    proxied: tuple[Settings, CuttableProxy], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed during an outage, the training process loses nothing: its backlog is on disk, and
    the next attempt at the job sends it first, in order and once."""
    settings, proxy = proxied
    direct = Settings(home=settings.home, database_url=pg_url)
    job_id = running_job(direct)
    journal = settings.home / "pending_writes.jsonl"
    monkeypatch.setattr(reporting, "RETRY_MAX_S", 0.2)
    first = DatabaseCallback(settings, job_id, journal=journal)
    first.on_start({"total_steps": 12, "num_train_samples": 48, "effective_batch_size": 4})
    assert not journal.exists()  # nothing waits, nothing is kept on disk
    proxy.cut()
    first.on_epoch_end(record(1))
    first.on_progress({"epoch": 2, "step": 5, "total_steps": 12})  # progress is not kept
    first.on_checkpoint({"epoch": 1, "step": 4})
    time.sleep(0.3)
    first.on_epoch_end(record(2))
    assert [json.loads(line)["kind"] for line in journal.read_text().splitlines()] == [
        "epoch",
        "update",
        "epoch",
    ]
    del first  # killed: no flush
    proxy.restore()
    second = DatabaseCallback(settings, job_id, journal=journal)
    assert second.flush(timeout_s=10)
    second.on_start({"total_steps": 12, "num_train_samples": 48, "start_step": 8})
    assert not journal.exists()
    with session_scope(direct) as session:
        epochs = session.scalars(
            select(EpochMetric.epoch)
            .where(EpochMetric.job_id == job_id)
            .order_by(EpochMetric.epoch)
        )
        assert list(epochs) == [1, 2]
        kinds = session.scalars(
            select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
        )
        assert list(kinds) == ["training", "epoch", "checkpoint", "epoch", "training"]
    # A third attempt finds no journal: nothing is written twice.
    third = DatabaseCallback(settings, job_id, journal=journal)
    assert third.flush(timeout_s=1)
    with session_scope(direct) as session:
        count = session.scalars(select(JobEvent.id).where(JobEvent.job_id == job_id)).all()
        assert len(count) == 5


def running_job(settings: Settings) -> str:
    job_id = new_job_id()
    with session_scope(settings) as session:
        session.add(
            Job(
                id=job_id,
                spec={},
                effective_batch_size=8,
                status=JobStatus.RUNNING,
                heartbeat_at=utcnow(),
            )
        )
        session.commit()
    return job_id
