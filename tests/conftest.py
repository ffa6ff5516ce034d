"""Fixtures shared by the service tests: real SQLite, PostgreSQL and Redis, never mocks.

PostgreSQL gets a fresh database per test session (``gradacc_test_<random>``, dropped at the end)
and Redis a fresh queue name, so concurrent runs do not collide. Where a service is unreachable
the tests that need it skip with the reason, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from gradacc.db import get_engine
from gradacc.settings import Settings

# The hooks that hand the costliest test files out first (tests/schedule.py).
from tests.schedule import pytest_collection_modifyitems, pytest_configure  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get(
    "GRADACC_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("GRADACC_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One compute thread per test process (inherited by every process a test starts): the suite runs
# two or more processes on 2 cores, and the tiny models gain nothing from a second thread while
# OpenMP's idle threads spin. Measured on test_equivalence.py alone: 22 % less CPU, same wall time.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Starlette's test client sends ``Host: testserver``; without keys the API answers only loopback
# names (api/http/host_gate.py, tested with the default in tests/api/test_browser_attacks.py).
os.environ.setdefault("GRADACC_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")

# One tiny built-in job (64 rows, 1 epoch, a few seconds): what the service tests submit.
TINY: dict[str, Any] = {
    "model": "builtin:tiny-bert",
    "dataset": "builtin:sentiment",
    "task": "sequence-classification",
    "backend": "pytorch",
    "num_train_epochs": 1,
    "max_train_samples": 64,
    "max_eval_samples": 32,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 2,
}


def service_missing(what: str, exc: Exception) -> None:
    reason = f"{what} is not reachable ({type(exc).__name__}: {exc})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; under CI=true a missing service is a failure", pytrace=False)
    pytest.skip(reason)


def migrate(database_url: str) -> None:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("sqlalchemy.url", database_url)
    command.upgrade(config, "head")


@contextmanager
def fresh_pg_database(prefix: str) -> Iterator[str]:
    """A new, empty PostgreSQL database (its SQLAlchemy URL), dropped on the way out."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        service_missing("PostgreSQL", exc)
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    url = f"{base}/{name}"
    try:
        yield url
    finally:
        get_engine(url).dispose()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A migrated PostgreSQL database of its own for this test session (SQLAlchemy URL)."""
    with fresh_pg_database("gradacc_test") as url:
        migrate(url)
        yield url


@pytest.fixture(scope="session")
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing("Redis", exc)
    return REDIS_URL


def sqlite_file(settings: Settings) -> Path:
    return Path(settings.resolved_database_url().removeprefix("sqlite:///"))


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite database migrated to head for the session, closed (its WAL folded in): each
    test's embedded database is a copy, not another run of every migration."""
    settings = Settings(home=tmp_path_factory.mktemp("migrated") / "home")
    settings.home.mkdir(parents=True)
    migrate(settings.resolved_database_url())
    get_engine(settings.resolved_database_url()).dispose()
    return sqlite_file(settings)


@pytest.fixture
def embedded_settings(tmp_path: Path, migrated_sqlite: Path) -> Settings:
    """The embedded defaults (SQLite and the filesystem broker) under a fresh home, migrated."""
    settings = Settings(home=tmp_path / "home")
    settings.home.mkdir(parents=True)
    database = sqlite_file(settings)
    database.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(migrated_sqlite, database)
    return settings


@pytest.fixture(params=["sqlite", "postgresql"])
def db_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings on each database; the broker is the real filesystem transport (nobody reads it)."""
    if request.param == "sqlite":
        settings: Settings = request.getfixturevalue("embedded_settings")
        return settings
    pg_url: str = request.getfixturevalue("pg_url")
    with get_engine(pg_url).begin() as connection:
        connection.execute(
            text(
                "TRUNCATE jobs, files, tenant_turns, workers, tinker_requests, tinker_models, tinker_sessions, tinker_checkpoints CASCADE"
            )
        )
    return Settings(home=tmp_path / "home", database_url=pg_url)


def unique_queue() -> str:
    return f"gradacc-test-{secrets.token_hex(4)}"
