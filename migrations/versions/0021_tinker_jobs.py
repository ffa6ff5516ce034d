"""Tinker sessions placed as jobs: a job's kind, a session's priority, ranks and hosting job, a model's
parked state (swapped out between two hosting jobs).

Revision ID: 0021_tinker_jobs
Revises: 0020_tinker
Create Date: 2026-12-05 13:30:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021_tinker_jobs"
down_revision: str | Sequence[str] | None = "0020_tinker"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column("kind", sa.String(length=16), nullable=False, server_default="training"),
    )
    op.add_column(
        "tinker_sessions",
        sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "tinker_sessions",
        sa.Column("ranks", sa.Integer(), nullable=False, server_default="1"),
    )
    op.add_column("tinker_sessions", sa.Column("job_id", sa.String(length=32)))
    op.add_column("tinker_models", sa.Column("parked", sa.String(length=1024)))


def downgrade() -> None:
    op.drop_column("tinker_models", "parked")
    op.drop_column("tinker_sessions", "job_id")
    op.drop_column("tinker_sessions", "ranks")
    op.drop_column("tinker_sessions", "priority")
    op.drop_column("jobs", "kind")
