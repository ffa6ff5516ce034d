"""Run the Alembic migrations from code (``gradacc migrate``, and ``gradacc serve`` when embedded)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

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
