"""The Tinker API's rows: a client's session, its models (training models and samplers, each held
by one worker's host through a lease), their requests in arrival order (each a future), and
their checkpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, Integer, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from gradacc.tables import Base, UTCDateTime, utcnow


class TinkerSession(Base):
    __tablename__ = "tinker_sessions"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    tags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    user_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, doc="last heartbeat")
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finish_reason: Mapped[str | None] = mapped_column(String(16))
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    ranks: Mapped[int] = mapped_column(Integer, default=1, server_default="1", doc="its devices")
    job_id: Mapped[str | None] = mapped_column(String(32), doc="the job hosting it, latest")


class TinkerModel(Base):
    """A training model (``<session>:train:<n>``) or a sampler (``<session>:sample:<n>``)."""

    __tablename__ = "tinker_models"
    __table_args__ = (Index("ix_tinker_models_tenant", "tenant", "created_at"),)

    id: Mapped[str] = mapped_column(String(96), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(40))
    tenant: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(8), doc="train or sample")
    base_model: Mapped[str] = mapped_column(String(256), doc="its name for the client")
    rank: Mapped[int] = mapped_column(Integer, default=0, doc="LoRA rank; 0: every weight")
    seed: Mapped[int] = mapped_column(Integer, default=0)
    optimizer: Mapped[str] = mapped_column(String(16), default="adamw")
    weights_path: Mapped[str | None] = mapped_column(String(512), doc="a sampler's tinker:// path")
    user_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="active", doc="active, closed, lost")
    error: Mapped[str | None] = mapped_column(String(1024))
    progressed: Mapped[bool] = mapped_column(default=False, doc="its weights left the base")
    holder: Mapped[str | None] = mapped_column(String(255), doc="the worker whose host holds it")
    held_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    parked: Mapped[str | None] = mapped_column(String(1024), doc="swapped out between hosts")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, doc="last request")


class TinkerRequest(Base):
    """One call: answered in ``arrival`` order per model, once per ``(model_id, seq_id)``."""

    __tablename__ = "tinker_requests"
    __table_args__ = (
        UniqueConstraint("model_id", "seq_id", name="uq_tinker_requests_seq"),
        Index("ix_tinker_requests_pending", "model_id", "status", "arrival"),
    )

    arrival: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(64))
    model_id: Mapped[str] = mapped_column(String(96))
    seq_id: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(32))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    status: Mapped[str] = mapped_column(String(8), default="pending", doc="pending, done, failed")
    result: Mapped[bytes | None] = mapped_column(LargeBinary)
    result_type: Mapped[str | None] = mapped_column(String(8), doc="proto or json")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class TinkerCheckpoint(Base):
    """``tinker://<run_id>/<checkpoint_id>``, ``checkpoint_id`` = ``<kind>/<name>``."""

    __tablename__ = "tinker_checkpoints"
    __table_args__ = (Index("ix_tinker_checkpoints_token", "download_token"),)

    run_id: Mapped[str] = mapped_column(String(96), primary_key=True)
    checkpoint_id: Mapped[str] = mapped_column(String(160), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    file: Mapped[str] = mapped_column(String(1024), doc="the saved state, or an export's folder")
    folder: Mapped[str | None] = mapped_column(String(1024), doc="a model folder, when written")
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    download_token: Mapped[str | None] = mapped_column(String(64), doc="an export's URLs'")
    token_expires: Mapped[datetime | None] = mapped_column(UTCDateTime)
