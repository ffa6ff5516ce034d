"""The predictions table as a queue (``gradacc.tables.Prediction``): the API writes a request and
waits for its answer; a worker's predict server takes the oldest pending one, answers it. Taking
is one conditional UPDATE, so two servers never take the same request."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gradacc.ids import time_ordered_id
from gradacc.tables import Prediction, PredictionStatus, utcnow

P = PredictionStatus


def new_prediction_id() -> str:
    return time_ordered_id("pred_")


def create_prediction(
    session: Session, *, job_id: str, tenant: str, step: int | None, request: dict[str, Any]
) -> str:
    prediction_id = new_prediction_id()
    session.add(
        Prediction(
            id=prediction_id,
            job_id=job_id,
            tenant=tenant,
            step=step,
            request=request,
            status=P.PENDING,
        )
    )
    return prediction_id


def count_waiting(session: Session, *, tenant: str, since: datetime) -> int:
    """The tenant's requests not yet answered, made after ``since`` (older ones belong to a wait
    that is over: an API process that died while waiting)."""
    unanswered = Prediction.status.in_([P.PENDING, P.RUNNING])
    waiting = select(func.count()).where(
        Prediction.tenant == tenant, unanswered, Prediction.created_at >= since
    )
    return int(session.scalar(waiting) or 0)


def take_prediction(session: Session, *, worker: str) -> Prediction | None:
    """The oldest pending request, now this worker's; None when there is none (or another
    server took it first: the next poll tries again)."""
    oldest = session.scalar(
        select(Prediction.id).where(Prediction.status == P.PENDING).order_by(Prediction.id).limit(1)
    )
    if oldest is None:
        return None
    taken = session.execute(
        update(Prediction)
        .where(Prediction.id == oldest, Prediction.status == P.PENDING)
        .values(status=P.RUNNING, worker=worker)
    )
    if taken.rowcount != 1:  # type: ignore[attr-defined]
        return None
    return session.get(Prediction, oldest)


def answer_prediction(
    session: Session,
    *,
    prediction_id: str,
    response: dict[str, Any] | None = None,
    error: str | None = None,
) -> None:
    """Record the answer, unless the API gave up on it meanwhile (it is failed then)."""
    status = P.DONE if error is None else P.FAILED
    session.execute(
        update(Prediction)
        .where(Prediction.id == prediction_id, Prediction.status == P.RUNNING)
        .values(status=status, response=response, error=error, answered_at=utcnow())
    )


def give_up(session: Session, *, prediction_id: str) -> None:
    """The API's wait ran out: a pending request is not taken any more; a late answer is kept
    out of the table (``answer_prediction`` answers running requests only)."""
    session.execute(
        update(Prediction)
        .where(Prediction.id == prediction_id, Prediction.status.in_([P.PENDING, P.RUNNING]))
        .values(status=P.FAILED, error="timeout", answered_at=utcnow())
    )


def read_answer(session: Session, *, prediction_id: str) -> tuple[str, Any, str | None]:
    """(status, response, error) of a request."""
    row = session.execute(
        select(Prediction.status, Prediction.response, Prediction.error).where(
            Prediction.id == prediction_id
        )
    ).one()
    return str(row.status), row.response, row.error
