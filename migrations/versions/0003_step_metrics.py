"""Step-level metrics (one row every logging_steps optimizer steps); jobs.live_progress.

Revision ID: 0003_step_metrics
Revises: 0002
Create Date: 2026-11-30 13:50:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0003_step_metrics"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """step_metrics, unique on (job_id, step); jobs.live_progress (JSON, nullable)."""
    op.create_table(
        "step_metrics",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_step_metrics_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_step_metrics")),
        sa.UniqueConstraint("job_id", "step", name="uq_step_metrics_job_id_step"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("live_progress", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Drop them again."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("live_progress")
    op.drop_table("step_metrics")
