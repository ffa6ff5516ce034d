"""Step records from the training process reach the step_metrics table and the API: paged at
``?granularity=step``, and the latest one in the job's progress."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import update

from api.main import create_app
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job, utcnow
from tests.conftest import TINY
from worker.child.reporting import DatabaseCallback


def step(n: int) -> dict[str, float | int]:
    return {"step": n, "epoch": n / 10, "train_loss": 1.0 / n, "learning_rate": 1e-3,
            "grad_norm": 0.5, "samples_per_second": 100.0 + n, "eta_seconds": 10.0 - n}  # fmt: skip


def test_step_records_are_written_paged_and_shown_in_progress(db_settings: Settings) -> None:
    with TestClient(create_app(db_settings)) as client:
        job_id = client.post("/v1/jobs", json=TINY).json()["id"]
        with session_scope(db_settings) as session:
            started = utcnow() - timedelta(seconds=5)
            session.execute(
                update(Job).where(Job.id == job_id).values(status="running", started_at=started)
            )
            session.commit()
        callback = DatabaseCallback(db_settings, job_id)
        for n in range(1, 6):
            callback.on_step_metrics(step(n))  # the first goes out at once, the rest wait
        callback.on_epoch_end({"epoch": 1, "train_loss": 0.3, "optimizer_steps": 5})
        callback.on_step_metrics(step(3))  # a resumed run logs a step again: replaced, not doubled
        assert callback.flush(timeout_s=10)

        url = f"/v1/jobs/{job_id}/metrics"
        first = client.get(url, params={"granularity": "step", "limit": 3}).json()
        assert [r["step"] for r in first["data"]] == [1, 2, 3]
        assert first["has_more"] is True and first["last_step"] == 3
        rest = client.get(url, params={"granularity": "step", "after": 3}).json()
        assert [r["step"] for r in rest["data"]] == [4, 5] and rest["has_more"] is False
        assert rest["data"][0] == step(4)
        assert client.get(url).json()["data"][0]["epoch"] == 1  # epochs stay the default

        progress = client.get(f"/v1/jobs/{job_id}").json()["progress"]
        assert progress["train_loss"] == 1.0 / 3 and progress["samples_per_second"] == 103.0
        assert progress["eta_seconds"] == 7.0 and progress["elapsed_seconds"] >= 5
        assert client.get(url, params={"granularity": "steps"}).status_code == 422


def test_the_runs_start_records_its_format_and_each_warning(db_settings: Settings) -> None:
    with TestClient(create_app(db_settings)) as client:
        job_id = client.post("/v1/jobs", json=TINY).json()["id"]
        with session_scope(db_settings) as session:
            session.execute(update(Job).where(Job.id == job_id).values(status="running"))
            session.commit()
        callback = DatabaseCallback(db_settings, job_id)
        warnings = ["3 training and 0 eval rows have nothing to train", "1 optimizer step"]
        callback.on_start({"total_steps": 4, "dataset_format": "messages", "warnings": warnings})
        assert callback.flush(timeout_s=10)
        job = client.get(f"/v1/jobs/{job_id}").json()
        events = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
    assert job["dataset_format"] == "messages"
    assert [e["message"] for e in events if e["kind"] == "warning"] == warnings
