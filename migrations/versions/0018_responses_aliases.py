"""Responses kept by /v1/responses (``store``): their input items and answer, per tenant, chained
by ``previous_id``; and the model aliases tenants set through /v1/aliases.

Revision ID: 0018_responses_aliases
Revises: 0017_stream_seq
Create Date: 2026-12-05 06:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_responses_aliases"
down_revision: str | Sequence[str] | None = "0017_stream_seq"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("previous_id", sa.String(length=40)),
        sa.Column("input_items", sa.JSON(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_responses")),
    )
    op.create_index("ix_responses_tenant_id", "responses", ["tenant", "id"])
    op.create_table(
        "model_aliases",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("alias", sa.String(length=512), nullable=False),
        sa.Column("model", sa.String(length=512), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "alias", name=op.f("pk_model_aliases")),
    )


def downgrade() -> None:
    op.drop_table("model_aliases")
    op.drop_index("ix_responses_tenant_id", table_name="responses")
    op.drop_table("responses")
