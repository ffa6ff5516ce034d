"""A job's stream rows: its events, and its epoch and step records (the fine-tuning API's
metrics events with them). Writers take the job's stream lock so that ids follow commit order,
and a place in the job's stream that follows it across the three tables."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session

from gradacc.db import conflict_insert, upsert
from gradacc.openai.names import evaluation_metrics, openai_metrics
from gradacc.tables import EpochMetric, JobEvent, JobStream, StepMetric, utcnow


def next_stream_place(session: Session, *, job_id: str) -> int:
    """Take the job's stream lock, then the next place in its stream (``JobStream``): the
    ``seq`` of the rows this call writes.

    PostgreSQL: writers of one job's stream rows (events, step and epoch records) take turns until
    commit, so that the ids of a job's rows follow their commit order. The stream's cursor is the
    last id sent (``api.stream.reads``): a row that got a lower id but committed after a higher one
    would otherwise never be sent. (SQLite has one writer at a time anyway.) The places follow the
    same order across the three tables: the stream is merged by them, so a live stream and its
    replay agree (by time they did not: a worker stamps an event when it happens and writes it
    later, after rows stamped when written)."""
    # No autoflush: the lock needs no pending row written, and a row's own error (a POST's
    # idempotency race on the job it adds) belongs to the caller's commit, not to here.
    with session.no_autoflush:
        if session.get_bind().dialect.name == "postgresql":
            key = text("SELECT pg_advisory_xact_lock(hashtext('gradacc-stream'), hashtext(:job))")
            session.execute(key, {"job": job_id})
        insert_on_conflict = conflict_insert(session)
        if insert_on_conflict is not None:
            bump = insert_on_conflict(JobStream).values(job_id=job_id, seq=1)
            bump = bump.on_conflict_do_update(
                index_elements=["job_id"], set_={"seq": JobStream.seq + 1}
            ).returning(JobStream.seq)
            return int(session.execute(bump).scalar_one())
        stream = session.get(JobStream, job_id, with_for_update=True)
        if stream is None:
            stream = JobStream(job_id=job_id, seq=0)
            session.add(stream)
        stream.seq += 1
        return stream.seq


def add_event(
    session: Session,
    *,
    job_id: str,
    kind: str,
    message: str,
    at: datetime | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    seq = next_stream_place(session, job_id=job_id)
    moment = at or utcnow()
    session.add(
        JobEvent(job_id=job_id, kind=kind, message=message, created_at=moment, data=data, seq=seq)
    )


METRICS_EVENT = "metrics"  # the fine-tuning API's metrics events; /v1/jobs leaves them out


def _metrics_event(session: Session, *, job_id: str, record: dict[str, Any]) -> None:
    data = openai_metrics(record)
    add_event(session, job_id=job_id, kind=METRICS_EVENT, message=_message(data), data=data)


def _message(data: dict[str, Any]) -> str:
    message = f"Step {data['step']}: training loss={_short(data['train_loss'])}"
    if data.get("valid_loss") is not None:
        message += f", validation loss={_short(data['valid_loss'])}"
    if data.get("full_valid_loss") is not None:
        message += f", full validation loss={_short(data['full_valid_loss'])}"
    if data.get("train_rewards_accuracies") is not None:  # a dpo job's
        message += f", reward accuracy={_short(data['train_rewards_accuracies'])}"
    if data.get("train_reward_mean") is not None:  # a reinforcement job's
        message += f", reward mean={_short(data['train_reward_mean'])}"
    if data.get("valid_reward_mean") is not None:
        message += f", validation reward mean={_short(data['valid_reward_mean'])}"
    return message


def _epoch_evaluation(session: Session, *, job_id: str, record: dict[str, Any]) -> None:
    """An epoch's evaluation (of the whole validation set: OpenAI's ``full_valid_*`` too) joins
    the metrics event of the step the epoch ended at, as it joins that step's row of the
    results file; an event of its own when no step record fell there."""
    if record.get("eval_loss") is None or record.get("optimizer_steps") is None:
        return
    step = int(record["optimizer_steps"])
    figures = evaluation_metrics(record)
    query = select(JobEvent).where(
        JobEvent.job_id == job_id,
        JobEvent.kind == METRICS_EVENT,
        JobEvent.data["step"].as_integer() == step,
    )
    event = session.scalars(query.order_by(JobEvent.id.desc()).limit(1)).first()
    if event is None:
        data = openai_metrics({"step": step}) | figures
        add_event(session, job_id=job_id, kind=METRICS_EVENT, message=_message(data), data=data)
        return
    event.data = {**(event.data or {}), **figures}  # a new dict: the JSON column sees the change
    event.message = _message(event.data)


def _short(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.4f}"


def record_epoch_metrics(
    session: Session, *, job_id: str, record: dict[str, Any], metrics_events: bool = False
) -> None:
    """Insert one epoch's record, or replace it: (job, epoch) is unique, a rewrite never doubles.
    ``metrics_events``: a fine-tuning job's; its evaluation joins them."""
    values = {
        "seq": next_stream_place(session, job_id=job_id),
        "job_id": job_id,
        "epoch": int(record["epoch"]),
        "train_loss": _float_or_none(record.get("train_loss")),
        "eval_loss": _float_or_none(record.get("eval_loss")),
        "record": record,
        "created_at": utcnow(),
    }
    update = ["train_loss", "eval_loss", "record"]
    upsert(session, EpochMetric, values, keys=["job_id", "epoch"], update=update)
    if metrics_events:
        _epoch_evaluation(session, job_id=job_id, record=record)


def record_step_metrics(
    session: Session, *, job_id: str, records: list[dict[str, Any]], metrics_events: bool = False
) -> None:
    """Insert step records, or replace them: a run resumed from a checkpoint logs its steps
    after the checkpoint again, and (job, step) is unique. ``metrics_events``: a fine-tuning
    job's, which the fine-tuning API also lists as events."""
    if not records:
        return
    seq = next_stream_place(session, job_id=job_id)
    rows = [
        {"job_id": job_id, "step": int(r["step"]), "record": r, "created_at": utcnow(), "seq": seq}
        for r in records
    ]
    upsert(session, StepMetric, rows, keys=["job_id", "step"], update=["record"])
    if metrics_events:
        # Replaced like the records themselves: a resume's steps are never listed twice.
        steps = [row["step"] for row in rows]
        again = (JobEvent.job_id == job_id) & (JobEvent.kind == METRICS_EVENT)
        session.execute(
            delete(JobEvent).where(again, JobEvent.data["step"].as_integer().in_(steps))
        )
        for record in records:
            _metrics_event(session, job_id=job_id, record=record)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
