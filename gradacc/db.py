"""Engine and sessionmaker, one per database URL, shared by the API, the worker and migrations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, create_engine, event, insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from gradacc.settings import Settings

# What an unreachable or overloaded database raises: the service waits these out (503 in the
# API, retry with backoff in the worker) instead of failing the request or the job.
DATABASE_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError, PoolTimeout)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the API read while a worker writes; foreign keys are off by default in SQLite.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


@lru_cache(maxsize=8)
def get_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        # timeout: wait for a writer in another process instead of failing with "locked".
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # connect_timeout: an unreachable server fails a request within seconds (503), not minutes.
    return create_engine(
        url,
        pool_size=10,
        max_overflow=20,
        pool_recycle=300,
        connect_args={"connect_timeout": 5},
    )


@lru_cache(maxsize=8)
def get_read_engine(url: str) -> Engine:
    """For reads that need no transaction: each statement is one round trip, with no BEGIN and
    no ROLLBACK around it (the API's poll endpoints). It shares the pool of ``get_engine``, so a
    dead connection found by either invalidates the pool of both."""
    engine = get_engine(url)
    # pysqlite already runs a plain SELECT outside a transaction; PostgreSQL needs telling.
    if url.startswith("sqlite"):
        return engine
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def get_sessionmaker(settings: Settings, *, autocommit: bool = False) -> sessionmaker[Session]:
    """``autocommit=True``: sessions on ``get_read_engine``."""
    return _sessionmaker_for(settings.resolved_database_url(), autocommit)


@lru_cache(maxsize=16)
def _sessionmaker_for(url: str, autocommit: bool) -> sessionmaker[Session]:
    engine = get_read_engine(url) if autocommit else get_engine(url)
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(settings: Settings) -> Iterator[Session]:
    """A session for one unit of work outside a request; commits are explicit."""
    with get_sessionmaker(settings)() as session:
        yield session


def conflict_insert(session: Session) -> Any | None:
    """The ``insert`` of the session's dialect that has ``ON CONFLICT`` (PostgreSQL's and
    SQLite's), or None for another dialect."""
    return {"postgresql": postgresql.insert, "sqlite": sqlite.insert}.get(
        session.get_bind().dialect.name
    )


def upsert(
    session: Session,
    table: Any,
    rows: dict[str, Any] | list[dict[str, Any]],
    *,
    keys: list[str],
    update: list[str],
) -> None:
    """Insert ``rows``, or update their ``update`` columns where a row with the same ``keys``
    exists (PostgreSQL and SQLite: ``ON CONFLICT DO UPDATE``; another dialect: a plain insert)."""
    insert_on_conflict = conflict_insert(session)
    if insert_on_conflict is None:
        session.execute(insert(table), rows if isinstance(rows, list) else [rows])
        return
    stmt = insert_on_conflict(table).values(rows)
    set_ = {column: stmt.excluded[column] for column in update}
    session.execute(stmt.on_conflict_do_update(index_elements=keys, set_=set_))
