"""Predictions: the requests of POST /v1/jobs/{id}/predict and a worker's answers; a job's name
and metadata.

Revision ID: 0011_predictions
Revises: 0010_scheduling
Create Date: 2026-12-01 16:10:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_predictions"
down_revision: str | Sequence[str] | None = "0010_scheduling"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "predictions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("response", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("worker", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_predictions_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_predictions")),
    )
    op.create_index("ix_predictions_status_id", "predictions", ["status", "id"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("name", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("metadata", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("metadata")
        batch.drop_column("name")
    op.drop_index("ix_predictions_status_id", table_name="predictions")
    op.drop_table("predictions")
