"""An API started on a database nobody migrated refuses to serve it, saying what to do: /healthz
answers, /readyz and every route answer 503 ``not_migrated`` naming ``gradacc migrate``, and no
request logs a traceback. Once migrated, the same process serves (both databases)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.settings import Settings
from tests.conftest import TINY, fresh_pg_database, migrate
from tests.support import wait_until


@pytest.fixture(params=["sqlite", "postgresql"])
def bare_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings on a database that exists and holds no schema."""
    if request.param == "sqlite":
        yield Settings(home=tmp_path)
        return
    with fresh_pg_database("gradacc_bare") as url:
        yield Settings(home=tmp_path, database_url=url)


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
