"""A model's requests as futures. ``enqueue`` keeps a call once per ``(model_id, seq_id)``: the SDK
resends a POST with the same ``seq_id`` after a timeout, and a second copy would add its gradient
twice, so a resend is answered with the first copy's request id. The worker's host takes a model's
pending requests in arrival order (``next_pending``) and ``finish``es each with its answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, Select, exists, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gradacc.tables import utcnow
from gradacc.tinker.tables import TinkerModel, TinkerRequest


@dataclass(frozen=True)
class Answer:
    status: str  # pending, done, failed
    result: bytes | None
    result_type: str | None
    kind: str
    held: bool  # a worker's host holds its model (else it waits for a free worker)
    session_id: str | None = None  # its model's session, while it waits


def enqueue(
    session: Session,
    *,
    tenant: str,
    model_id: str,
    seq_id: int,
    kind: str,
    body: bytes,
    done: bytes | None = None,
) -> str:
    """The request id of the call (the first copy's for a resend). ``done``: answered already
    (a JSON result). Commits."""
    found = _same(session, model_id, seq_id)
    if found is not None:
        return found
    row = TinkerRequest(
        tenant=tenant,
        model_id=model_id,
        seq_id=seq_id,
        kind=kind,
        body=body,
        status="done" if done is not None else "pending",
        result=done,
        result_type="json" if done is not None else None,
    )
    session.add(row)
    session.execute(update(TinkerModel).where(TinkerModel.id == model_id).values(seen_at=utcnow()))
    try:
        session.commit()
    except IntegrityError:  # the same call, committed by a concurrent resend
        session.rollback()
        again = _same(session, model_id, seq_id)
        assert again is not None
        return again
    return str(row.arrival)


def _same(session: Session, model_id: str, seq_id: int) -> str | None:
    query = select(TinkerRequest.arrival).where(
        TinkerRequest.model_id == model_id, TinkerRequest.seq_id == seq_id
    )
    arrival = session.scalar(query)
    return None if arrival is None else str(arrival)


def answer(session: Session, *, tenant: str, request_id: str) -> Answer | None:
    """None: no such request of the tenant's."""
    if not request_id.isdigit():
        return None
    row = session.get(TinkerRequest, int(request_id))
    if row is None or row.tenant != tenant:
        return None
    held, session_id = True, None
    if row.status == "pending":
        model = session.get(TinkerModel, row.model_id)
        until = model.held_until if model is not None else None
        held = until is not None and until > utcnow()
        session_id = model.session_id if model is not None else None
    return Answer(row.status, row.result, row.result_type, row.kind, held, session_id)


def unheld(now: datetime) -> ColumnElement[bool]:
    """A model no live host holds (its lease absent or lapsed)."""
    return or_(TinkerModel.held_until.is_(None), TinkerModel.held_until < now)


def waiting_unheld(now: datetime) -> Select[str]:
    """Active models with a request waiting that no live host holds: what queues a host job
    (``gradacc.tinker.placement``) and what a host claims (``worker.tinker.host``)."""
    waiting = exists().where(
        TinkerRequest.model_id == TinkerModel.id, TinkerRequest.status == "pending"
    )
    return select(TinkerModel.id).where(TinkerModel.status == "active", unheld(now), waiting)


def next_pending(session: Session, model_ids: list[str]) -> TinkerRequest | None:
    """The oldest request waiting on one of ``model_ids``: each model's in arrival order (its
    chunks and calls add up in any order, but a step must follow its window). Between sessions
    and tenants, the scheduler shares the workers (``gradacc.tinker.placement``)."""
    if not model_ids:
        return None
    query = select(TinkerRequest).where(
        TinkerRequest.model_id.in_(model_ids), TinkerRequest.status == "pending"
    )
    return session.scalars(query.order_by(TinkerRequest.arrival).limit(1)).first()


def finish(session: Session, arrival: int, *, ok: bool, result: bytes, result_type: str) -> None:
    """Commits."""
    values = {"status": "done" if ok else "failed", "result": result, "result_type": result_type}
    stmt = update(TinkerRequest).where(TinkerRequest.arrival == arrival)
    session.execute(stmt.values(**values, done_at=utcnow()))
    session.commit()
