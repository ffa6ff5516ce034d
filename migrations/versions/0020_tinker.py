"""The Tinker API: sessions, models and samplers, their requests (futures), checkpoints.

Revision ID: 0020_tinker
Revises: 0019_evals_distillations
Create Date: 2026-12-05 11:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020_tinker"
down_revision: str | Sequence[str] | None = "0019_evals_distillations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tinker_sessions",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("user_metadata", sa.JSON()),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("seen_at", WHEN, nullable=False),
        sa.Column("finished_at", WHEN),
        sa.Column("finish_reason", sa.String(length=16)),
    )
    op.create_table(
        "tinker_models",
        sa.Column("id", sa.String(length=96), primary_key=True),
        sa.Column("session_id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("base_model", sa.String(length=256), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("optimizer", sa.String(length=16), nullable=False),
        sa.Column("weights_path", sa.String(length=512)),
        sa.Column("user_metadata", sa.JSON()),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.String(length=1024)),
        sa.Column("progressed", sa.Boolean(), nullable=False),
        sa.Column("holder", sa.String(length=255)),
        sa.Column("held_until", WHEN),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("seen_at", WHEN, nullable=False),
    )
    op.create_index("ix_tinker_models_tenant", "tinker_models", ["tenant", "created_at"])
    op.create_table(
        "tinker_requests",
        sa.Column("arrival", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("model_id", sa.String(length=96), nullable=False),
        sa.Column("seq_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("result", sa.LargeBinary()),
        sa.Column("result_type", sa.String(length=8)),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("done_at", WHEN),
        sa.UniqueConstraint("model_id", "seq_id", name="uq_tinker_requests_seq"),
    )
    op.create_index(
        "ix_tinker_requests_pending", "tinker_requests", ["model_id", "status", "arrival"]
    )
    op.create_table(
        "tinker_checkpoints",
        sa.Column("run_id", sa.String(length=96), primary_key=True),
        sa.Column("checkpoint_id", sa.String(length=160), primary_key=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("file", sa.String(length=1024), nullable=False),
        sa.Column("folder", sa.String(length=1024)),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("expires_at", WHEN),
        sa.Column("download_token", sa.String(length=64)),
        sa.Column("token_expires", WHEN),
    )
    op.create_index("ix_tinker_checkpoints_token", "tinker_checkpoints", ["download_token"])


def downgrade() -> None:
    op.drop_index("ix_tinker_checkpoints_token", table_name="tinker_checkpoints")
    op.drop_table("tinker_checkpoints")
    op.drop_index("ix_tinker_requests_pending", table_name="tinker_requests")
    op.drop_table("tinker_requests")
    op.drop_index("ix_tinker_models_tenant", table_name="tinker_models")
    op.drop_table("tinker_models")
    op.drop_table("tinker_sessions")
