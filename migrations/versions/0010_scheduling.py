"""Scheduling one server's devices: a job's priority and device count, the job that preempts it,
the claim's index over queued jobs, each tenant's last turn and each worker's device count.

Revision ID: 0010_scheduling
Revises: 0009_fine_tuning_api
Create Date: 2026-12-01 16:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_scheduling"
down_revision: str | Sequence[str] | None = "0009_fine_tuning_api"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

QUEUED = sa.text("status = 'queued'")
# Jobs stored before this revision keep their device count in the spec only.
SPEC_PROCESSES = {
    "postgresql": "COALESCE((spec->>'num_processes')::integer, 1)",
    "sqlite": "COALESCE(CAST(json_extract(spec, '$.num_processes') AS INTEGER), 1)",
}


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("priority", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(
            sa.Column("num_processes", sa.Integer(), server_default="1", nullable=False)
        )
        batch.add_column(sa.Column("preempted_by", sa.String(length=32), nullable=True))
    dialect = op.get_bind().dialect.name
    if dialect in SPEC_PROCESSES:
        op.execute(f"UPDATE jobs SET num_processes = {SPEC_PROCESSES[dialect]}")
    op.create_index(
        "ix_jobs_queued_tenant_priority_id",
        "jobs",
        ["tenant", "priority", "id", "num_processes"],
        postgresql_where=QUEUED,
        sqlite_where=QUEUED,
    )
    op.create_table(
        "tenant_turns",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("last_started_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_tenant_turns")),
    )
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("num_devices", sa.Integer(), server_default="1", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("num_devices")
    op.drop_table("tenant_turns")
    op.drop_index("ix_jobs_queued_tenant_priority_id", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("preempted_by")
        batch.drop_column("num_processes")
        batch.drop_column("priority")
