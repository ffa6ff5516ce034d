"""A resume asked while the paused job's worker was still letting go of it: recorded on the job,
and acted on by that worker as it lets go.

Revision ID: 0015_resume_requested
Revises: 0014_gang_capacity
Create Date: 2026-12-02 04:50:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_resume_requested"
down_revision: str | Sequence[str] | None = "0014_gang_capacity"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("resume_requested_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("resume_requested_at")
