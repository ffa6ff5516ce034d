"""Uploaded files (datasets and models).

Revision ID: 0004_files
Revises: 0003_workers
Create Date: 2026-11-30 13:40:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0004_files"
down_revision: str | Sequence[str] | None = "0003_workers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """files: one row per upload, its bytes under GRADACC_HOME/files/<id>/."""
    op.create_table(
        "files",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("filename", sa.String(length=255), nullable=False),
        sa.Column("stored_name", sa.String(length=64), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("purpose IN ('dataset', 'model')", name=op.f("ck_files_purpose")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    op.create_index("ix_files_tenant_id", "files", ["tenant", "id"], unique=False)


def downgrade() -> None:
    """Drop it again."""
    op.drop_index("ix_files_tenant_id", table_name="files")
    op.drop_table("files")
