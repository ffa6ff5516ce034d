"""Responses kept by /v1/responses (``store``): their input items and answer, per tenant, chained
by ``previous_id``; the model aliases tenants set through /v1/aliases; /v1/batches (batches, their
answered lines, and the files' batch purposes).

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


OLD_PURPOSES = "purpose IN ('dataset', 'model', 'fine-tune', 'fine-tune-results')"
NEW_PURPOSES = (
    "purpose IN ('dataset', 'model', 'fine-tune', 'fine-tune-results', 'batch', 'batch_output')"
)


def upgrade() -> None:
    with op.batch_alter_table("files") as batch:
        batch.drop_constraint(op.f("ck_files_purpose"), type_="check")
        batch.create_check_constraint("purpose", NEW_PURPOSES)
    op.create_table(
        "batches",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("input_file_id", sa.String(length=32), nullable=False),
        sa.Column("endpoint", sa.String(length=64), nullable=False),
        sa.Column("completion_window", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.JSON()),
        sa.Column("errors", sa.JSON()),
        sa.Column("output_file_id", sa.String(length=32)),
        sa.Column("error_file_id", sa.String(length=32)),
        sa.Column("holder", sa.String(length=255)),
        sa.Column("held_until", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("in_progress_at", sa.DateTime(timezone=True)),
        sa.Column("finalizing_at", sa.DateTime(timezone=True)),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("cancelling_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
    )
    op.create_index("ix_batches_tenant_id", "batches", ["tenant", "id"])
    op.create_table(
        "batch_lines",
        sa.Column("batch_id", sa.String(length=40), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Boolean(), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["batches.id"],
            name=op.f("fk_batch_lines_batch_id_batches"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("batch_id", "line", name=op.f("pk_batch_lines")),
    )
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
    op.drop_table("batch_lines")
    op.drop_index("ix_batches_tenant_id", table_name="batches")
    op.drop_table("batches")
    with op.batch_alter_table("files") as batch:
        batch.drop_constraint(op.f("ck_files_purpose"), type_="check")
        batch.create_check_constraint("purpose", OLD_PURPOSES)
    op.drop_table("model_aliases")
    op.drop_index("ix_responses_tenant_id", table_name="responses")
    op.drop_table("responses")
