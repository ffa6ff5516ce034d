"""/v1/evals (evals and their runs), distillations, and the items either keeps as it finishes
them; the files' evals purpose.

Revision ID: 0019_evals_distillations
Revises: 0018_responses_aliases
Create Date: 2026-12-05 08:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_evals_distillations"
down_revision: str | Sequence[str] | None = "0018_responses_aliases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = ("dataset", "model", "fine-tune", "fine-tune-results", "batch", "batch_output")
OLD_PURPOSES = "purpose IN (" + ", ".join(f"'{p}'" for p in BEFORE) + ")"
NEW_PURPOSES = "purpose IN (" + ", ".join(f"'{p}'" for p in (*BEFORE, "evals")) + ")"


def _lease_columns() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("error", sa.JSON()),
        sa.Column("metadata", sa.JSON()),
        sa.Column("holder", sa.String(length=255)),
        sa.Column("held_until", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
    ]


def upgrade() -> None:
    with op.batch_alter_table("files") as batch:
        batch.drop_constraint(op.f("ck_files_purpose"), type_="check")
        batch.create_check_constraint("purpose", NEW_PURPOSES)
    op.create_table(
        "evals",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("data_source_config", sa.JSON(), nullable=False),
        sa.Column("testing_criteria", sa.JSON(), nullable=False),
        sa.Column("metadata", sa.JSON()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evals")),
    )
    op.create_index("ix_evals_tenant_id", "evals", ["tenant", "id"])
    op.create_table(
        "eval_runs",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("eval_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("model", sa.String(length=512)),
        sa.Column("data_source", sa.JSON(), nullable=False),
        *_lease_columns(),
        sa.ForeignKeyConstraint(
            ["eval_id"], ["evals.id"], name=op.f("fk_eval_runs_eval_id_evals"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_runs")),
    )
    op.create_index("ix_eval_runs_eval_id", "eval_runs", ["eval_id", "id"])
    op.create_table(
        "distillations",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("teacher", sa.String(length=512), nullable=False),
        sa.Column("prompt_file_id", sa.String(length=32), nullable=False),
        sa.Column("sampling", sa.JSON(), nullable=False),
        sa.Column("output_file_id", sa.String(length=32)),
        *_lease_columns(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_distillations")),
    )
    op.create_index("ix_distillations_tenant_id", "distillations", ["tenant", "id"])
    op.create_table(
        "run_items",
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("item", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "item", name=op.f("pk_run_items")),
    )


def downgrade() -> None:
    op.drop_table("run_items")
    op.drop_index("ix_distillations_tenant_id", table_name="distillations")
    op.drop_table("distillations")
    op.drop_index("ix_eval_runs_eval_id", table_name="eval_runs")
    op.drop_table("eval_runs")
    op.drop_index("ix_evals_tenant_id", table_name="evals")
    op.drop_table("evals")
    with op.batch_alter_table("files") as batch:
        batch.drop_constraint(op.f("ck_files_purpose"), type_="check")
        batch.create_check_constraint("purpose", OLD_PURPOSES)
