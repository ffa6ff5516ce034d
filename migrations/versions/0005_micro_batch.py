"""The micro-batch and K in force on a job (chosen by the machine with "auto", halved after an
out-of-memory error).

Revision ID: 0005_micro_batch
Revises: 0004_files
Create Date: 2026-11-30 13:50:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_micro_batch"
down_revision: str | Sequence[str] | None = "0004_files"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("micro_batch_size", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("gradient_accumulation_steps", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("gradient_accumulation_steps")
        batch.drop_column("micro_batch_size")
