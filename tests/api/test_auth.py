"""API keys and tenants (both databases): keys are stored hashed, a tenant sees and cancels only
its own jobs (others' are 404), idempotency keys are per tenant, over the queued-job or the
running-job limit is 429."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from api.main import create_app
from gradacc.auth import create_api_key, hash_key
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import ApiKey, Job, utcnow
from tests.api.test_jobs import TINY
from tests.conftest import ROOT


@pytest.fixture
def auth_settings(db_settings: Settings) -> Settings:
    return db_settings.model_copy(update={"require_auth": True, "max_queued_per_tenant": 3})


@pytest.fixture
def authed(auth_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(auth_settings), raise_server_exceptions=False) as client:
        yield client


def bearer(settings: Settings, tenant: str) -> dict[str, str]:
    with session_scope(settings) as session:
        return {"Authorization": f"Bearer {create_api_key(session, tenant=tenant)}"}


def test_requests_without_a_valid_key_are_401(authed: TestClient, auth_settings: Settings) -> None:
    for headers in ({}, {"Authorization": "Bearer gak_nope"}, {"Authorization": "Basic eDp5"}):
        response = authed.post("/v1/jobs", json=TINY, headers=headers)
        assert response.status_code == 401, response.text
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
        assert authed.get("/v1/jobs", headers=headers).status_code == 401
    assert authed.get("/healthz").status_code == 200  # probes need no key
    with session_scope(auth_settings) as session:
        assert session.scalar(select(Job.id)) is None


def test_a_tenant_reaches_only_its_own_jobs(authed: TestClient, auth_settings: Settings) -> None:
    alice, bob = bearer(auth_settings, "alice"), bearer(auth_settings, "bob")
    job = authed.post("/v1/jobs", json=TINY, headers=alice).json()
    for path in ("", "/metrics", "/events"):
        assert authed.get(f"/v1/jobs/{job['id']}{path}", headers=alice).status_code == 200
        other = authed.get(f"/v1/jobs/{job['id']}{path}", headers=bob)
        assert other.status_code == 404 and other.json()["error"]["code"] == "job_not_found"
    assert authed.post(f"/v1/jobs/{job['id']}/cancel", headers=bob).status_code == 404
    assert authed.get("/v1/jobs", headers=bob).json()["data"] == []
    assert [j["id"] for j in authed.get("/v1/jobs", headers=alice).json()["data"]] == [job["id"]]
    # The same idempotency key in two tenants is two jobs.
    key = {"Idempotency-Key": "same"}
    first = authed.post("/v1/jobs", json=TINY, headers=alice | key)
    second = authed.post("/v1/jobs", json=TINY, headers=bob | key)
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]
    assert authed.post(f"/v1/jobs/{job['id']}/cancel", headers=alice).status_code == 200


def test_keys_are_stored_hashed(auth_settings: Settings) -> None:
    token = bearer(auth_settings, "carol")["Authorization"].removeprefix("Bearer ")
    with session_scope(auth_settings) as session:
        rows = session.execute(select(ApiKey.key_hash, ApiKey.tenant)).all()
    assert (hash_key(token), "carol") in rows
    assert not any(token in str(value) for row in rows for value in row)


def test_a_revoked_key_stops_working_once_its_cache_entry_expires(auth_settings: Settings) -> None:
    settings = auth_settings.model_copy(update={"api_key_cache_s": 5.0})
    alice = bearer(settings, "alice")
    key_hash = hash_key(alice["Authorization"].removeprefix("Bearer "))
    app = create_app(settings)
    now = [1000.0]
    app.state.key_cache.clock = lambda: now[0]  # the cache's seconds, moved by the test alone
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/v1/jobs", headers=alice).status_code == 200  # looked up, cached
        with session_scope(settings) as session:
            revoke = update(ApiKey).where(ApiKey.key_hash == key_hash).values(revoked_at=utcnow())
            session.execute(revoke)
            session.commit()
        now[0] += 4.9
        assert client.get("/v1/jobs", headers=alice).status_code == 200  # still cached
        now[0] += 0.2
        assert client.get("/v1/jobs", headers=alice).status_code == 401


def test_over_the_queued_limit_is_429(authed: TestClient, auth_settings: Settings) -> None:
    alice, bob = bearer(auth_settings, "alice"), bearer(auth_settings, "bob")
    ids = [authed.post("/v1/jobs", json=TINY, headers=alice).json()["id"] for _ in range(3)]
    refused = authed.post("/v1/jobs", json=TINY, headers=alice)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_jobs"
    assert authed.post("/v1/jobs", json=TINY, headers=bob).status_code == 201  # per tenant
    authed.post(f"/v1/jobs/{ids[0]}/cancel", headers=alice)
    assert authed.post("/v1/jobs", json=TINY, headers=alice).status_code == 201


def test_over_the_running_limit_is_429(authed: TestClient, auth_settings: Settings) -> None:
    limited = auth_settings.model_copy(update={"max_running_per_tenant": 2})
    with TestClient(create_app(limited)) as client:
        alice, bob = bearer(limited, "alice"), bearer(limited, "bob")
        ids = [client.post("/v1/jobs", json=TINY, headers=alice).json()["id"] for _ in range(2)]
        with session_scope(limited) as session:  # as a worker would: both start
            session.execute(update(Job).where(Job.id.in_(ids)).values(status="running"))
            session.commit()
        refused = client.post("/v1/jobs", json=TINY, headers=alice)
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "too_many_jobs" and "2 jobs already running" in error["message"]
        assert client.post("/v1/jobs", json=TINY, headers=bob).status_code == 201  # per tenant
        with session_scope(limited) as session:
            assert session.scalar(select(func.count()).where(Job.tenant == "alice")) == 2
        client.post(f"/v1/jobs/{ids[0]}/cancel", headers=alice)  # a slot frees up
        assert client.post("/v1/jobs", json=TINY, headers=alice).status_code == 201


def gradacc_in(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "commands.cli", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_create_api_key_prints_a_working_key_and_where_it_went(tmp_path: Path) -> None:
    env = {**os.environ, "GRADACC_HOME": str(tmp_path)}
    env.pop("GRADACC_DATABASE_URL", None)
    assert gradacc_in(ROOT, env, "migrate").returncode == 0
    result = gradacc_in(ROOT, env, "create-api-key", "--tenant", "acme")
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert token.startswith("gak_") and len(token) > 40 and "\n" not in token
    assert f"stored for tenant acme in {tmp_path.resolve() / 'gradacc.db'}" in result.stderr
    settings = Settings(home=tmp_path, require_auth=True)
    with TestClient(create_app(settings)) as client:
        created = client.post("/v1/jobs", json=TINY, headers={"Authorization": f"Bearer {token}"})
    assert created.status_code == 201, created.text
    assert gradacc_in(ROOT, env, "create-api-key", "--tenant", "../etc").returncode == 2


def test_create_api_key_never_makes_a_database_of_its_own(tmp_path: Path) -> None:
    """Run from another directory, the default home (./var) is not the server's: refused with
    the fix named, and nothing created; an unmigrated database is refused too."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("GRADACC_HOME", "GRADACC_DATABASE_URL")}
    refused = gradacc_in(elsewhere, env, "create-api-key", "--tenant", "acme")
    assert refused.returncode == 2 and refused.stdout == ""
    assert f"no database at {elsewhere / 'var' / 'gradacc.db'}" in refused.stderr
    assert "GRADACC_HOME" in refused.stderr and "gradacc migrate" in refused.stderr
    assert list(elsewhere.iterdir()) == []
    (elsewhere / "var").mkdir()
    (elsewhere / "var" / "gradacc.db").touch()  # a file with no schema
    unmigrated = gradacc_in(elsewhere, env, "create-api-key", "--tenant", "acme")
    assert unmigrated.returncode == 2 and unmigrated.stdout == ""
    assert "has no schema" in unmigrated.stderr and "gradacc migrate" in unmigrated.stderr
