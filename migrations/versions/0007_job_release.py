"""When the worker that claimed a job let go of it (its process gone, its last rows written): a
finished job is deleted only after that, or once its worker's heartbeat went stale.

Revision ID: 0007_job_release
Revises: 0006_watching
Create Date: 2026-12-01 10:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_job_release"
down_revision: str | Sequence[str] | None = "0006_watching"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("released_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("released_at")
