"""Step-level metrics (one row every logging_steps optimizer steps); jobs.live_progress;
webhooks: jobs.webhook_url and webhook_on_epoch, the webhook_deliveries outbox, webhook_secrets.

Revision ID: 0006_watching
Revises: 0005_micro_batch
Create Date: 2026-11-30 13:50:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0006_watching"
down_revision: str | Sequence[str] | None = "0005_micro_batch"
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
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_webhook_deliveries_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index(
        "ix_webhook_deliveries_status_next",
        "webhook_deliveries",
        ["status", "next_attempt_at"],
        unique=False,
    )
    op.create_table(
        "webhook_secrets",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_webhook_secrets")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("live_progress", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("webhook_url", sa.String(length=2048), nullable=True))
        batch_op.add_column(
            sa.Column("webhook_on_epoch", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    """Drop them again."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("webhook_on_epoch")
        batch_op.drop_column("webhook_url")
        batch_op.drop_column("live_progress")
    op.drop_table("webhook_secrets")
    op.drop_index("ix_webhook_deliveries_status_next", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("step_metrics")
