"""Tenants and idempotency keys on jobs; hashed API keys.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 07:25:24.022967

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """api_keys; jobs.tenant (existing jobs: 'default'), idempotency_key, request_hash."""
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("tenant", sa.String(length=64), nullable=False, server_default="default")
        )
        batch_op.add_column(sa.Column("idempotency_key", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("request_hash", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_jobs_tenant_id", ["tenant", "id"], unique=False)
        batch_op.create_unique_constraint(
            "uq_jobs_tenant_idempotency_key", ["tenant", "idempotency_key"]
        )


def downgrade() -> None:
    """Drop them again."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_constraint("uq_jobs_tenant_idempotency_key", type_="unique")
        batch_op.drop_index("ix_jobs_tenant_id")
        batch_op.drop_column("request_hash")
        batch_op.drop_column("idempotency_key")
        batch_op.drop_column("tenant")
    op.drop_table("api_keys")
