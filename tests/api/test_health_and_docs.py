"""Health, readiness (with a broker that really is unreachable), OpenAPI docs, no torch import."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import delete, update

from api.main import create_app
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Worker, utcnow
from gradacc.workers import register_worker

ROOT = Path(__file__).resolve().parents[2]


def test_health_and_readiness(client: TestClient, db_settings: Settings) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "checks": {}, "workers": None}
    no_worker = client.get("/readyz")
    assert no_worker.status_code == 503, no_worker.text
    assert no_worker.json()["error"]["code"] == "no_workers"
    # The row a worker writes when it is ready (tests/e2e/test_serve_signals.py starts real ones).
    with session_scope(db_settings) as session:
        session.execute(delete(Worker))
        register_worker(session, name="host:1", pid=1, devices=["cpu"])
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok", "workers": "1 alive"}
    assert [w["name"] for w in ready.json()["workers"]] == ["host:1"]
    stale = db_settings.worker_alive_s + 1
    with session_scope(db_settings) as session:
        session.execute(update(Worker).values(heartbeat_at=utcnow() - timedelta(seconds=stale)))
        session.commit()
    assert client.get("/readyz").json()["error"]["code"] == "no_workers"  # it stopped beating


def test_readiness_fails_when_the_broker_is_unreachable(embedded_settings: Settings) -> None:
    settings = embedded_settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "not_ready"
    assert error["message"].startswith("broker unreachable")
    assert client.get("/healthz").status_code == 200


def test_docs_carry_an_example_that_the_api_accepts(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
    example = body["examples"]["tiny"]["value"]
    created = client.post("/v1/jobs", json=example)
    assert created.status_code == 201, created.text
    assert created.json()["effective_batch_size"] == 32


def test_api_never_imports_torch(tmp_path: Path) -> None:
    code = (
        "import sys, api.main; api.main.app; "
        "bad = [m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules]; "
        "assert not bad, bad"
    )
    env = {**os.environ, "GRADACC_HOME": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=60)


def test_an_unusable_database_is_503_in_the_same_error_shape(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "gradacc.db"
    settings = Settings(home=tmp_path, database_url=f"sqlite:///{missing}")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        crashed = client.get("/v1/jobs/job_0123456789abcdef0123")
        not_ready = client.get("/readyz")
    assert crashed.status_code == 503
    assert crashed.json() == {
        "error": {
            "code": "database_unavailable",
            "message": "the database is unavailable; retry later",
            "param": None,
            "type": "server_error",
        }
    }
    assert not_ready.status_code == 503
    assert not_ready.json()["error"]["message"].startswith("database unreachable")
