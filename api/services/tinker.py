"""The Tinker API's calls (docs/tinker.md): sessions, training models, and every training call as
a future in its model's queue (``gradacc.tinker.queue``); samplers are ``tinker_sampling``'s,
training runs and checkpoints ``tinker_runs``'. Nothing here trains: a worker's Tinker host
answers the queue. A refused call is a 422 or 404 naming the field, never a 409 or a 5xx, which
the SDK would retry for minutes."""

from __future__ import annotations

import json
import secrets
from typing import Any

import zstandard
from celery import Celery
from sqlalchemy import update
from sqlalchemy.orm import Session

from gradacc.errors import InvalidRequest, ObjectNotFound
from gradacc.executors.select import cluster_capacity
from gradacc.scheduling.capacity import check_fits
from gradacc.scheduling.queue import send_or_leave
from gradacc.settings import PRIORITY_BOUND, Settings
from gradacc.sources.hub import check_allowed
from gradacc.sources.limits import check_priority
from gradacc.tables import utcnow
from gradacc.tinker import names, paths, placement, queue
from gradacc.tinker.tables import TinkerCheckpoint, TinkerModel, TinkerSession
from gradacc.tinker.wire import pb

FAMILIES = ("adamw", "sgd")
MAX_RANKS = 64


def need(body: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = body.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise InvalidRequest(f"required, a {getattr(kind, '__name__', 'value')}", param=key)
    return value


def mapping(body: dict[str, Any], key: str) -> dict[str, Any]:
    """An optional object field: {} when absent, a 422 naming it when it is not an object."""
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequest("an object", param=key)
    return value


def create_session(
    session: Session, settings: Settings, tenant: str, body: dict[str, Any]
) -> dict[str, Any]:
    """``user_metadata.priority`` (a string, as the SDK sends its values) is the priority of the
    session's host jobs, as a job's ``priority`` is (docs/scheduling.md); ``user_metadata.ranks``
    their data-parallel ranks, each a device of one machine (``worker.tinker.ranks``)."""
    metadata = mapping(body, "user_metadata")
    row = TinkerSession(
        id="ts-" + secrets.token_hex(10),
        tenant=tenant,
        tags=list(body.get("tags") or []),
        user_metadata=metadata or None,
        priority=_priority(metadata.get("priority"), settings),
        ranks=_ranks(session, metadata.get("ranks"), settings),
    )
    session.add(row)
    session.commit()
    return {"session_id": row.id, "type": "create_session"}


def place(sessions: Any, celery: Celery, settings: Settings, session_id: str) -> None:
    """A host job for the session unless it has a live one (``gradacc.tinker.placement``), and
    its message (``send_or_leave``: a broker outage leaves it to the reconciler)."""
    with sessions() as session:
        job_id = placement.ensure_host(session, session_id)
    if job_id is not None:
        send_or_leave(celery, settings, job_id)


def own_session(session: Session, tenant: str, session_id: Any) -> TinkerSession:
    row = session.get(TinkerSession, session_id) if isinstance(session_id, str) else None
    if row is None or row.tenant != tenant:
        raise ObjectNotFound("session", str(session_id), param="session_id")
    return row


def open_session(session: Session, tenant: str, session_id: Any) -> TinkerSession:
    """The tenant's session, unless it finished (nothing new is made in a finished session)."""
    row = own_session(session, tenant, session_id)
    if row.finished_at is not None:
        raise InvalidRequest(f"session {row.id!r} finished", param="session_id")
    return row


def heartbeat(session: Session, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
    row = own_session(session, tenant, body.get("session_id"))
    row.seen_at = utcnow()
    session.commit()
    return {"type": "session_heartbeat"}


def finish(session: Session, tenant: str, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """The first reason wins; the session's models and samplers are released by their hosts."""
    row = own_session(session, tenant, session_id)
    if row.finished_at is None:
        reason = mapping(body, "reason").get("type", "success")
        row.finished_at, row.finish_reason = utcnow(), str(reason)[:16]
        stmt = update(TinkerModel).where(
            TinkerModel.session_id == row.id, TinkerModel.status == "active"
        )
        session.execute(stmt.values(status="closed"))
        session.commit()
    return {"session_id": row.id, "finish_reason": row.finish_reason}


def own_model(
    session: Session, tenant: str, model_id: Any, *, param: str = "model_id"
) -> TinkerModel:
    row = session.get(TinkerModel, model_id) if isinstance(model_id, str) else None
    if row is None or row.tenant != tenant:
        raise ObjectNotFound("model", str(model_id), param=param)
    return row


def active(row: TinkerModel, param: str) -> None:
    if row.status != "active":
        why = f": {row.error}" if row.error else ""
        raise InvalidRequest(f"model {row.id!r} is {row.status}{why}", param=param)


def checked_base(settings: Settings, base: str) -> str:
    """A base model the server offers (``gradacc/<name>``), or a hub id ``GRADACC_HUB_ALLOW``
    allows, as a job may train from it; else a 422 naming ``base_model``."""
    try:
        source = names.source_of(base)
    except ValueError as exc:
        raise InvalidRequest(str(exc).partition(": ")[2], param="base_model") from None
    if not source.startswith("builtin:"):
        check_allowed(source, settings, param="base_model")
    return base


def create_model(
    session: Session, settings: Settings, tenant: str, body: dict[str, Any]
) -> dict[str, Any]:
    owner = open_session(session, tenant, body.get("session_id"))
    number = need(body, "model_seq_id", int)
    base = checked_base(settings, need(body, "base_model", str))
    lora = mapping(body, "lora_config")
    rank = lora.get("rank", 0)
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank <= 1024:
        raise InvalidRequest("an integer from 0 (every weight) to 1024", param="lora_config.rank")
    if rank and not all(lora.get(k, True) for k in ("train_unembed", "train_mlp", "train_attn")):
        raise InvalidRequest(
            "this server puts adapters on every linear layer: train_unembed, train_mlp and "
            "train_attn must all be true",
            param="lora_config",
        )
    family = _family(body, "adamw")
    metadata = mapping(body, "user_metadata") or None
    model_id = _training_model(
        session, owner, number, base, rank, _seed(lora.get("seed")), family, metadata
    )
    done = json.dumps({"model_id": model_id, "type": "create_model"}).encode()
    request_id = queue.enqueue(
        session,
        tenant=tenant,
        model_id=model_id,
        seq_id=0,
        kind="create_model",
        body=b"{}",
        done=done,
    )
    return {"request_id": request_id, "model_id": model_id}


def _family(body: dict[str, Any], default: str) -> str:
    family = mapping(body, "optimizer_config").get("type", default)
    if family not in FAMILIES:
        raise InvalidRequest(
            f"one of {', '.join(FAMILIES)} (got {family!r})", param="optimizer_config.type"
        )
    return str(family)


def _training_model(
    session: Session,
    owner: TinkerSession,
    number: int,
    base: str,
    rank: int,
    seed: int,
    family: str,
    metadata: dict[str, Any] | None,
) -> str:
    """The session's n-th training model (``<session>:train:<n>``, the id the SDK derives),
    made unless a resent call made it already; flushed, not committed."""
    model_id = f"{owner.id}:train:{number}"
    if session.get(TinkerModel, model_id) is None:
        session.add(
            TinkerModel(
                id=model_id,
                session_id=owner.id,
                tenant=owner.tenant,
                kind="train",
                base_model=base,
                rank=rank,
                seed=seed,
                optimizer=family,
                user_metadata=metadata,
            )
        )
        session.flush()
    return model_id


def get_info(session: Session, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
    row = own_model(session, tenant, body.get("model_id"))
    return {
        "model_id": row.id,
        "model_data": {"arch": "transformer", "model_name": row.base_model},
        "optimizer_config": {"type": row.optimizer},
        "is_lora": row.rank > 0,
        "lora_rank": row.rank or None,
        "model_name": row.base_model,
        "type": "get_info",
    }


def forward_backward(session: Session, tenant: str, raw: bytes, encoding: str) -> dict[str, Any]:
    """A protobuf ``ForwardBackwardRequest`` (zstd when the client compressed it), queued whole."""
    if encoding.strip().lower() == "zstd":
        try:
            raw = zstandard.ZstdDecompressor().decompress(raw, max_output_size=256 << 20)
        except zstandard.ZstdError as exc:
            raise InvalidRequest(f"not a zstd frame ({exc})", param="body") from None
    message = pb.ForwardBackwardRequest()
    try:
        message.ParseFromString(raw)
    except Exception:
        raise InvalidRequest("not a ForwardBackwardRequest message", param="body") from None
    row = own_model(session, tenant, message.model_id)
    active(row, "model_id")
    if message.seq_id < 1:
        raise InvalidRequest("from 1", param="seq_id")
    kind = "forward" if message.forward_only else "forward_backward"
    request_id = queue.enqueue(
        session, tenant=tenant, model_id=row.id, seq_id=message.seq_id, kind=kind, body=raw
    )
    return {"request_id": request_id}


def model_call(session: Session, tenant: str, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """``optim_step``, ``save_weights``, ``save_weights_for_sampler``, ``save_weights_external``
    and ``load_weights`` on a model."""
    row = own_model(session, tenant, body.get("model_id"))
    active(row, "model_id")
    seq_id = need(body, "seq_id", int)
    if seq_id < 1:
        raise InvalidRequest("from 1", param="seq_id")
    extra: dict[str, Any] = {}
    if kind.startswith("save_weights") and (
        body.get("path") is not None or kind != "save_weights_for_sampler"
    ):
        try:
            paths.check_name(need(body, "path", str))
        except ValueError as exc:
            raise InvalidRequest(str(exc).partition(": ")[2], param="path") from None
    if kind == "save_weights_for_sampler" and body.get("path") is None:
        number = need(body, "sampling_session_seq_id", int)
        sampler_id = f"{row.session_id}:sample:{number}"
        name = f"ephemeral-{secrets.token_hex(6)}"
        extra = {"sampler_id": sampler_id, "ephemeral_name": name}
        if session.get(TinkerModel, sampler_id) is None:
            weights = str(paths.TinkerPath(row.id, "sampler_weights", name))
            session.add(new_sampler(row.session_id, sampler_id, tenant, row.base_model, weights))
            session.flush()
    if kind == "load_weights":
        checkpoint_row(session, tenant, need(body, "path", str))
    if body.get("age_encryption_recipients"):
        raise InvalidRequest(
            "age encryption is not served: export unencrypted (docs/tinker.md)",
            param="age_encryption_recipients",
        )
    data = json.dumps({**body, **extra}).encode()
    request_id = queue.enqueue(
        session, tenant=tenant, model_id=row.id, seq_id=seq_id, kind=kind, body=data
    )
    return {"request_id": request_id}


def new_sampler(
    session_id: str, sampler_id: str, tenant: str, base: str, weights: str | None
) -> TinkerModel:
    return TinkerModel(
        id=sampler_id,
        session_id=session_id,
        tenant=tenant,
        kind="sample",
        base_model=base,
        weights_path=weights,
    )


def checkpoint_row(
    session: Session, tenant: str, path: str, field: str = "path"
) -> TinkerCheckpoint:
    try:
        parsed = paths.parse(path, field)
    except ValueError as exc:
        raise InvalidRequest(str(exc).partition(": ")[2], param=field) from None
    found = session.get(TinkerCheckpoint, (parsed.run_id, parsed.checkpoint_id))
    if found is None or found.tenant != tenant:
        raise ObjectNotFound("checkpoint", path, param=field)
    return found


def create_via_load(session: Session, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
    """``create_training_client_from_state``: a new model in the session, its weights (and, when
    asked, optimizer state) from a ``save_state`` checkpoint of the tenant's."""
    owner = open_session(session, tenant, body.get("session_id"))
    number = need(body, "model_seq_id", int)
    found = checkpoint_row(session, tenant, need(body, "path", str))
    if not found.checkpoint_id.startswith("weights/"):
        raise InvalidRequest("load a save_state (weights/) checkpoint", param="path")
    source = session.get(TinkerModel, found.run_id)
    assert source is not None
    family = _family(body, source.optimizer)
    metadata = mapping(body, "user_metadata") or source.user_metadata
    model_id = _training_model(
        session, owner, number, source.base_model, source.rank, source.seed, family, metadata
    )
    data = json.dumps({**body, "model_id": model_id}).encode()
    request_id = queue.enqueue(
        session, tenant=tenant, model_id=model_id, seq_id=0, kind="load_weights", body=data
    )
    return {"request_id": request_id, "model_id": model_id}


def _seed(value: Any) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequest("an integer", param="lora_config.seed")
    return value


def _priority(value: Any, settings: Settings) -> int:
    """As a job's ``priority`` (a job's schema holds the lower bound; here, this does)."""
    if value is None:
        return 0
    param = "user_metadata.priority"
    try:
        priority = int(str(value))
    except ValueError:
        raise InvalidRequest("an integer", param=param) from None
    if priority < -PRIORITY_BOUND:
        raise InvalidRequest(f"at least {-PRIORITY_BOUND}", param=param)
    check_priority(priority, settings, param=param)
    return priority


def _ranks(session: Session, value: Any, settings: Settings) -> int:
    if value is None:
        return 1
    param = "user_metadata.ranks"
    try:
        ranks = int(str(value))
    except ValueError:
        raise InvalidRequest("an integer", param=param) from None
    if not 1 <= ranks <= MAX_RANKS:
        raise InvalidRequest(f"from 1 to {MAX_RANKS}", param=param)
    if ranks > 1:
        try:
            check_fits(cluster_capacity(settings, session=session), num_machines=1, devices=ranks)
        except InvalidRequest as exc:
            raise InvalidRequest(str(exc).partition(": ")[2], param=param) from None
    return ranks
