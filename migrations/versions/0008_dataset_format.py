"""The format a job's data is read in (text, messages, prompt-completion): known at POST for
built-in and uploaded data, else once training loads it.

Revision ID: 0008_dataset_format
Revises: 0007_job_release
Create Date: 2026-12-01 12:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_dataset_format"
down_revision: str | Sequence[str] | None = "0007_job_release"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("dataset_format", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("dataset_format")
