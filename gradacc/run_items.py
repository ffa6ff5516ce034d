"""The items an eval run or a distillation has finished (``RunItem``): kept once each, in the
commit that records it, so an item kept is never asked or graded again by whoever goes on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gradacc import leases
from gradacc.tables import RunItem


def keep(session: Session, run_id: str, item: int, status: str, record: dict[str, Any]) -> bool:
    """False: kept already (by a worker that held the run before). Commits."""
    return leases.keep_once(
        session, RunItem(run_id=run_id, item=item, status=status, record=record)
    )


def kept_numbers(session: Session, run_id: str) -> set[int]:
    return set(session.scalars(select(RunItem.item).where(RunItem.run_id == run_id)))


def kept(session: Session, run_id: str) -> Sequence[RunItem]:
    stmt = select(RunItem).where(RunItem.run_id == run_id).order_by(RunItem.item)
    return session.scalars(stmt).all()


def forget(session: Session, run_ids: list[str]) -> None:
    """The items of runs being deleted (the caller commits)."""
    if run_ids:
        session.execute(delete(RunItem).where(RunItem.run_id.in_(run_ids)))
