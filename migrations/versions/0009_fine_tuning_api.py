"""The OpenAI fine-tuning API: a paused status, a job's origin and its OpenAI fields, metrics
events' data, and the fine-tune and fine-tune-results file purposes.

Revision ID: 0009_fine_tuning_api
Revises: 0008_dataset_format
Create Date: 2026-12-01 13:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_fine_tuning_api"
down_revision: str | Sequence[str] | None = "0008_dataset_format"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_STATUSES = "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')"
NEW_STATUSES = "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'paused')"
OLD_PURPOSES = "purpose IN ('dataset', 'model')"
NEW_PURPOSES = "purpose IN ('dataset', 'model', 'fine-tune', 'fine-tune-results')"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_status"), type_="check")
        batch.create_check_constraint("status", NEW_STATUSES)
        batch.add_column(sa.Column("api", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("fine_tuning", sa.JSON(), nullable=True))
    with op.batch_alter_table("job_events") as batch:
        batch.add_column(sa.Column("data", sa.JSON(), nullable=True))
    with op.batch_alter_table("files") as batch:
        batch.drop_constraint(op.f("ck_files_purpose"), type_="check")
        batch.alter_column("purpose", type_=sa.String(length=32), existing_nullable=False)
        batch.create_check_constraint("purpose", NEW_PURPOSES)


def downgrade() -> None:
    with op.batch_alter_table("files") as batch:
        batch.drop_constraint(op.f("ck_files_purpose"), type_="check")
        batch.alter_column("purpose", type_=sa.String(length=16), existing_nullable=False)
        batch.create_check_constraint("purpose", OLD_PURPOSES)
    with op.batch_alter_table("job_events") as batch:
        batch.drop_column("data")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("fine_tuning")
        batch.drop_column("api")
        batch.drop_constraint(op.f("ck_jobs_status"), type_="check")
        batch.create_check_constraint("status", OLD_STATUSES)
