"""PostgreSQL unreachable or its connections cut: the API answers 503 in the one error shape,
with no driver text (host, user, password), and recovers by itself once the database answers.
The machine's PostgreSQL is never stopped: one app points at a closed port, and the other has
its own connections terminated."""

from __future__ import annotations

import psycopg
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.db import get_engine
from gradacc.settings import Settings
from tests.api.test_jobs import TINY
from tests.conftest import PG_ADMIN_URL

UNAVAILABLE = {
    "error": {
        "code": "database_unavailable",
        "message": "the database is unavailable; retry later",
        "param": None,
        "type": "server_error",
    }
}


def test_a_closed_port_is_503_without_secrets(embedded_settings: Settings) -> None:
    url = "postgresql+psycopg://gradacc:s3cret-pw@127.0.0.1:1/gradacc"
    settings = embedded_settings.model_copy(update={"database_url": url})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        answers = [
            client.post("/v1/jobs", json=TINY),
            client.post("/v1/jobs", json=TINY, headers={"Idempotency-Key": "k"}),
            client.get("/v1/jobs"),
            client.get("/v1/jobs/job_0123456789abcdef0123"),
            client.get("/v1/jobs/job_0123456789abcdef0123/events"),
            client.post("/v1/jobs/job_0123456789abcdef0123/cancel"),
        ]
        auth_app = create_app(settings.model_copy(update={"require_auth": True}))
        with TestClient(auth_app, raise_server_exceptions=False) as authed:
            answers.append(authed.get("/v1/jobs", headers={"Authorization": "Bearer gak_x"}))
        ready = client.get("/readyz")
    for response in answers:
        assert response.status_code == 503, response.text
        assert response.json() == UNAVAILABLE
    assert ready.status_code == 503 and ready.json()["error"]["code"] == "not_ready"
    for response in [*answers, ready]:
        assert "s3cret" not in response.text and "127.0.0.1" not in response.text


def test_cut_connections_are_503_once_then_the_api_recovers(
    client: TestClient, db_settings: Settings
) -> None:
    if db_settings.database_url is None:
        return  # SQLite has no server to lose
    job_id = client.post("/v1/jobs", json=TINY).json()["id"]
    assert client.get(f"/v1/jobs/{job_id}").status_code == 200  # pooled connections now open
    database = db_settings.database_url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        )
    try:
        statuses = [client.get(f"/v1/jobs/{job_id}").status_code for _ in range(3)]
        # The dead pooled connection fails one request; the pool is then invalidated and refilled.
        assert statuses == [503, 200, 200], statuses
        assert client.post("/v1/jobs", json=TINY).status_code == 201
    finally:
        # The engine is shared by every test of this process (get_engine is cached per URL):
        # none may inherit a connection cut here (the next test's TRUNCATE once did).
        get_engine(db_settings.database_url).dispose()
