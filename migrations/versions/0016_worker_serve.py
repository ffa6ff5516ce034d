"""Where a worker's predict server answers OpenAI's chat completions, and its token.

Revision ID: 0016_worker_serve
Revises: 0015_resume_requested
Create Date: 2026-12-02 08:20:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_worker_serve"
down_revision: str | Sequence[str] | None = "0015_resume_requested"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("serve_url", sa.String(length=255)))
        batch.add_column(sa.Column("serve_token", sa.String(length=255)))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("serve_token")
        batch.drop_column("serve_url")
