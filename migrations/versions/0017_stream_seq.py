"""A job's stream rows take places in commit order (``job_streams``, and ``seq`` on each row), so
that a live stream and its replay from Last-Event-ID give the same order.

Revision ID: 0017_stream_seq
Revises: 0016_worker_serve
Create Date: 2026-12-03 15:30:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_stream_seq"
down_revision: str | Sequence[str] | None = "0016_worker_serve"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("job_events", "step_metrics", "epoch_metrics")


def upgrade() -> None:
    op.create_table(
        "job_streams",
        sa.Column("job_id", sa.String(length=32), primary_key=True),
        sa.Column("seq", sa.Integer(), nullable=False),
    )
    for table in TABLES:  # rows written before have none: they keep their order by time
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("seq", sa.Integer()))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("seq")
    op.drop_table("job_streams")
