"""Capacity from the workers table: each worker's machine and queue (GRADACC_MACHINE,
GRADACC_QUEUE); and the gang
releases a job counted while the cluster lacked the machines it needs.

Revision ID: 0014_gang_capacity
Revises: 0013_job_outputs
Create Date: 2026-12-02 04:40:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_gang_capacity"
down_revision: str | Sequence[str] | None = "0013_job_outputs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A worker registered before this revision has no machine (its host name stands in) and no
    # queue (counted for any) until it registers again: gradacc.workers.live_machines.
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("machine", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("queue", sa.String(length=255), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("gang_releases", sa.Integer(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("gang_releases")
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("queue")
        batch.drop_column("machine")
