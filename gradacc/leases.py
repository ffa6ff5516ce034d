"""Work a worker holds by a lease it renews (a batch, an eval run, a distillation): a table with
``id``, ``status``, ``holder`` and ``held_until`` columns. A worker that dies stops renewing, and
once its lease lapses another worker claims the work and goes on from what was kept."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import InstrumentedAttribute, Session

from gradacc.tables import utcnow


class Leased(Protocol):
    id: Any
    status: Any
    holder: Any
    held_until: Any


Row = TypeVar("Row", bound=Leased)


def claim(
    session: Session, table: type[Row], *, worker: str, lease_s: float, running: Sequence[str]
) -> Row | None:
    """The oldest row in a ``running`` status that no live worker holds (or this one), held for
    ``lease_s``. Commits."""
    now = utcnow()
    held_until: InstrumentedAttribute[Any] = table.held_until
    holder: InstrumentedAttribute[Any] = table.holder
    ident: InstrumentedAttribute[Any] = table.id
    free = or_(held_until.is_(None), held_until < now, holder == worker)
    query = select(ident).where(table.status.in_(running), free).order_by(ident).limit(1)
    found = session.scalar(query.with_for_update(skip_locked=True))
    if found is None:
        session.rollback()
        return None
    # Taken only if still free: SQLite has no row lock, so two workers may both have read it.
    take = update(table).where(ident == found, free)
    until = now + timedelta(seconds=lease_s)
    taken = session.execute(take.values(holder=worker, held_until=until)).rowcount  # type: ignore[attr-defined]
    session.commit()
    return session.get(table, found, populate_existing=True) if taken == 1 else None


def renew(
    session: Session, table: type[Row], row_id: str, *, worker: str, lease_s: float
) -> str | None:
    """The row's status, its lease renewed; None when another worker holds it now. Commits."""
    until = utcnow() + timedelta(seconds=lease_s)
    stmt = update(table).where(table.id == row_id, table.holder == worker)
    found = session.execute(stmt.values(held_until=until)).rowcount  # type: ignore[attr-defined]
    session.commit()
    return session.scalar(select(table.status).where(table.id == row_id)) if found else None


def cancel(session: Session, table: type[Row], row_id: str, *, running: Sequence[str]) -> None:
    """A row in a ``running`` status no worker holds ends ``canceled`` now; one a worker holds
    goes ``canceling``, and that worker ends it before its next item. Conditional updates, so a
    worker ending it at the same moment wins or loses whole. Commits."""
    now = utcnow()
    ident: InstrumentedAttribute[Any] = table.id
    status: InstrumentedAttribute[Any] = table.status
    unheld = update(table).where(ident == row_id, status.in_(running), table.holder.is_(None))
    if not session.execute(unheld.values(status="canceled", ended_at=now)).rowcount:  # type: ignore[attr-defined]
        held = update(table).where(ident == row_id, status.in_(running))
        session.execute(held.values(status="canceling"))
    session.commit()


def keep_once(session: Session, row: Any) -> bool:
    """A finished line or item added, in its own commit; False when it was kept already (by a
    worker that held the work before). Commits."""
    session.add(row)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        return False
    return True
