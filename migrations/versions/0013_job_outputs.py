"""A job's outputs on disk, name -> bytes, recorded by its worker when they change (a poll reads
the row alone instead of walking the job's folder).

Revision ID: 0013_job_outputs
Revises: 0012_gang_slots
Create Date: 2026-12-02 01:40:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_job_outputs"
down_revision: str | Sequence[str] | None = "0012_gang_slots"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Jobs stored before this revision show no outputs until their worker records them again;
    # their files are still listed and served by /artifacts.
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("outputs", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("outputs")
