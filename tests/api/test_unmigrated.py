"""An API started on a database nobody migrated refuses to serve it, saying what to do: /healthz
answers, /readyz and every route answer 503 ``not_migrated`` naming ``gradacc migrate``, and no
request logs a traceback. Once migrated, the same process serves (both databases)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.db import get_engine
from gradacc.settings import Settings
from tests.conftest import PG_ADMIN_URL, TINY, migrate, service_missing
from tests.support import wait_until


@pytest.fixture(params=["sqlite", "postgresql"])
def bare_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings on a database that exists and holds no schema."""
    if request.param == "sqlite":
        yield Settings(home=tmp_path)
        return
    name = f"gradacc_bare_{secrets.token_hex(4)}"
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        service_missing("PostgreSQL", exc)
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    url = f"{base}/{name}"
    try:
        yield Settings(home=tmp_path, database_url=url)
    finally:
        get_engine(url).dispose()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_an_unmigrated_database_is_refused_with_the_fix_named(
    bare_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    settings = bare_settings.model_copy(update={"require_auth": True})  # key lookups too
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.get("/healthz").status_code == 200
        answers = [
            client.get("/readyz"),
            client.get("/v1/jobs"),
            client.post("/v1/jobs", json=TINY, headers={"Authorization": "Bearer gak_x"}),
            client.get("/metrics"),
        ]
        for answer in answers:
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["code"] == "not_migrated" and "gradacc migrate" in error["message"]
        assert "Traceback" not in caplog.text
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

        migrate(settings.resolved_database_url())
        wait_until(lambda: client.get("/v1/jobs").status_code == 401, timeout=10,
                   what="serving once migrated")  # fmt: skip
        assert client.get("/readyz").json()["error"]["code"] == "no_workers"
