"""Run the Alembic migrations from code (``gradacc migrate``, and ``gradacc serve`` when embedded),
and tell whether a database is at the latest revision (the API refuses to serve one that is not)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from gradacc.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def alembic_config(database_url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", database_url)
    return config


def upgrade_database(settings: Settings) -> None:
    if settings.is_embedded:
        settings.home.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(settings.resolved_database_url()), "head")


@lru_cache(maxsize=1)
def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None  # the project ships migrations
    return head


def schema_problem(engine: Engine) -> str | None:
    """None when the database is at the latest revision; else what to do about it. Raises the
    database's own error when it cannot be reached (that is not a schema problem)."""
    with engine.connect() as connection:
        try:
            found = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except DBAPIError as exc:
            if not missing_schema(exc):
                raise
            found = None
    if found == head_revision():
        return None
    state = "has no schema" if found is None else f"is at revision {found}"
    return (
        f"the database {state}, not {head_revision()}: run `gradacc migrate` (compose runs it "
        "before the API starts)"
    )


def missing_schema(exc: BaseException) -> bool:
    """``exc`` is the database saying a table does not exist (SQLite's and PostgreSQL's words)."""
    if not isinstance(exc, DBAPIError):
        return False
    said = str(exc.orig).lower()
    return "no such table" in said or ("relation" in said and "does not exist" in said)
