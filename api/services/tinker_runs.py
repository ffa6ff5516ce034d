"""The Tinker API's REST reads: training runs (a training model is a run), their checkpoints,
and what a ``tinker://`` path holds. Another tenant's run or checkpoint is a 404."""

from __future__ import annotations

import secrets
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.services.tinker import checkpoint_row, own_model
from gradacc.errors import InvalidRequest, ObjectNotFound
from gradacc.tables import utcnow
from gradacc.tinker import paths
from gradacc.tinker.tables import TinkerCheckpoint, TinkerModel


def _when(value: datetime) -> str:
    return value.isoformat()


def checkpoint_view(row: TinkerCheckpoint) -> dict[str, Any]:
    kind = row.checkpoint_id.partition("/")[0]
    return {
        "checkpoint_id": row.checkpoint_id,
        "checkpoint_type": paths.KINDS[kind],
        "time": _when(row.created_at),
        "tinker_path": f"{paths.PREFIX}{row.run_id}/{row.checkpoint_id}",
        "size_bytes": row.size_bytes,
        "public": False,
        "expires_at": _when(row.expires_at) if row.expires_at else None,
    }


def _last(session: Session, run_id: str, kind: str) -> dict[str, Any] | None:
    query = (
        select(TinkerCheckpoint)
        .where(
            TinkerCheckpoint.run_id == run_id, TinkerCheckpoint.checkpoint_id.startswith(kind + "/")
        )
        .order_by(TinkerCheckpoint.created_at.desc())
        .limit(1)
    )
    row = session.scalar(query)
    return checkpoint_view(row) if row is not None else None


def run_view(session: Session, row: TinkerModel) -> dict[str, Any]:
    return {
        "training_run_id": row.id,
        "base_model": row.base_model,
        "model_owner": row.tenant,
        "is_lora": row.rank > 0,
        "corrupted": row.status == "lost",
        "lora_rank": row.rank or None,
        "last_request_time": _when(row.seen_at),
        "last_checkpoint": _last(session, row.id, "weights"),
        "last_sampler_checkpoint": _last(session, row.id, "sampler_weights"),
        "user_metadata": row.user_metadata,
    }


def get_run(session: Session, tenant: str, run_id: str) -> dict[str, Any]:
    row = own_model(session, tenant, run_id, param="run_id")
    if row.kind != "train":
        raise ObjectNotFound("training run", run_id, param="run_id")
    return run_view(session, row)


def list_runs(session: Session, tenant: str, *, limit: int, offset: int) -> dict[str, Any]:
    mine = (TinkerModel.tenant == tenant, TinkerModel.kind == "train")
    total = session.scalar(select(func.count()).select_from(TinkerModel).where(*mine)) or 0
    query = select(TinkerModel).where(*mine).order_by(TinkerModel.created_at.desc())
    rows = session.scalars(query.limit(max(1, min(limit, 1000))).offset(max(offset, 0))).all()
    return {
        "training_runs": [run_view(session, row) for row in rows],
        "cursor": {"offset": offset, "limit": limit, "total_count": total},
    }


def list_checkpoints(
    session: Session, tenant: str, run_id: str | None, *, limit: int = 1000, offset: int = 0
) -> dict[str, Any]:
    query = select(TinkerCheckpoint).where(TinkerCheckpoint.tenant == tenant)
    if run_id is not None:
        own_model(session, tenant, run_id, param="run_id")
        query = query.where(TinkerCheckpoint.run_id == run_id)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    query = (
        query.order_by(TinkerCheckpoint.created_at)
        .limit(max(1, min(limit, 1000)))
        .offset(max(offset, 0))
    )
    return {
        "checkpoints": [checkpoint_view(row) for row in session.scalars(query).all()],
        "cursor": {"offset": offset, "limit": limit, "total_count": total},
    }


def delete_checkpoint(
    session: Session, tenant: str, run_id: str, checkpoint_id: str
) -> dict[str, Any]:
    row = checkpoint_row(
        session, tenant, f"{paths.PREFIX}{run_id}/{checkpoint_id}", "checkpoint_id"
    )
    for kept in (row.file, row.folder):  # the saved state, and a model folder when written
        if kept and Path(kept).is_dir():
            shutil.rmtree(kept, ignore_errors=True)
        elif kept:
            Path(kept).unlink(missing_ok=True)
    session.delete(row)
    session.commit()
    return {}


def set_ttl(
    session: Session, tenant: str, run_id: str, checkpoint_id: str, ttl: Any
) -> dict[str, Any]:
    """``None``: kept until deleted; else from an hour to ten years."""
    row = checkpoint_row(
        session, tenant, f"{paths.PREFIX}{run_id}/{checkpoint_id}", "checkpoint_id"
    )
    if ttl is not None and (not isinstance(ttl, int) or not 3600 <= ttl <= 315_360_000):
        raise InvalidRequest("null, or 3600 to 315360000 seconds", param="ttl_seconds")
    row.expires_at = None if ttl is None else utcnow() + timedelta(seconds=ttl)
    session.commit()
    return {}


def weights_info(session: Session, tenant: str, path: str) -> dict[str, Any]:
    row = checkpoint_row(session, tenant, path, "tinker_path")
    run = session.get(TinkerModel, row.run_id)
    assert run is not None
    return {
        "base_model": run.base_model,
        "is_lora": run.rank > 0,
        "lora_rank": run.rank or None,
        "optimizer_config": {"type": run.optimizer},
        "train_unembed": True,
        "train_mlp": True,
        "train_attn": True,
    }


URL_TTL = timedelta(hours=1)
DOWNLOADS = "/tinker-files"  # outside /api/v1: a URL carries its own token, no key


def external_urls(
    session: Session, tenant: str, base_url: str, run_id: str, name: str
) -> dict[str, Any]:
    """A URL per file of an export, each carrying a token that lapses in an hour (asking again
    makes a new one); the files are fetched with no key, as the SDK's downloaders do."""
    path = f"{paths.PREFIX}{run_id}/external_weights/{name}"
    row = checkpoint_row(session, tenant, path, "checkpoint_id")
    folder = Path(row.file)
    if not folder.is_dir():
        raise InvalidRequest("this export's files are gone", param="checkpoint_id")
    row.download_token, row.token_expires = secrets.token_urlsafe(32), utcnow() + URL_TTL
    session.commit()
    files = sorted(f.relative_to(folder).as_posix() for f in folder.rglob("*") if f.is_file())
    root = f"{base_url.rstrip('/')}{DOWNLOADS}/{row.download_token}"
    return {"urls": {f: f"{root}/{f}" for f in files}, "expires": _when(row.token_expires)}


def download(session: Session, token: str, relative: str) -> Path:
    """The file a download URL names, while its token holds; a 404 otherwise."""
    row = session.scalar(select(TinkerCheckpoint).where(TinkerCheckpoint.download_token == token))
    if row is None or row.token_expires is None or row.token_expires < utcnow():
        raise ObjectNotFound("download", token[:8] + "…", param="token")
    folder = Path(row.file).resolve()
    target = (folder / relative).resolve()
    if folder not in target.parents or not target.is_file():
        raise ObjectNotFound("file", relative, param="path")
    return target
