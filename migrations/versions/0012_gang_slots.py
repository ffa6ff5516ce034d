"""Gang scheduling: a job's machine count, and the slots a job over several machines holds on
each of them (gradacc.scheduling.gang).

Revision ID: 0012_gang_slots
Revises: 0011_predictions
Create Date: 2026-12-01 18:40:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_gang_slots"
down_revision: str | Sequence[str] | None = "0011_predictions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Jobs stored before this revision were refused num_machines > 1 at POST: 1 is right.
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("num_machines", sa.Integer(), server_default="1", nullable=False)
        )
    op.create_table(
        "gang_slots",
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=255), nullable=False),
        sa.Column("machine", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("port", sa.Integer(), nullable=True),
        sa.Column("held_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_gang_slots_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "node_rank", name=op.f("pk_gang_slots")),
        sa.UniqueConstraint("job_id", "machine", name="uq_gang_slots_job_id_machine"),
    )


def downgrade() -> None:
    op.drop_table("gang_slots")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("num_machines")
