"""The database reads behind the job stream: a subscriber's history at connect, in pages of
``HISTORY_PAGE`` rows (never a job's whole history in memory), and the hub's one poll per tick
for every watched job together (never a query per subscriber)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, and_, or_, select

from api.services.jobs import JOB_COLUMNS
from gradacc.jobs.records import METRICS_EVENT
from gradacc.tables import EpochMetric, Job, JobEvent, JobStream, StepMetric

# Row ids are 32-bit on PostgreSQL, and a bound parameter is cast to the column's type: a larger
# number in a client's Last-Event-ID would fail the query. No row lies past this one anyway.
MAX_ROW_ID = 2**31 - 1
HISTORY_PAGE = 500  # rows of each table per read of a stream's history


@dataclass(frozen=True)
class Cursor:
    """The last event, step record and epoch record a subscriber has, by row id. The SSE id of
    every message is this cursor after it, so ``Last-Event-ID`` resumes exactly."""

    events: int = 0
    steps: int = 0
    epochs: int = 0

    def __str__(self) -> str:
        return f"{self.events}-{self.steps}-{self.epochs}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """Raises ValueError on anything but three non-negative integers; a part past the largest
        row id means "after every row" and is read as that id."""
        events, steps, epochs = (min(int(part), MAX_ROW_ID) for part in text.split("-"))
        if min(events, steps, epochs) < 0:
            raise ValueError(text)
        return cls(events, steps, epochs)

    def past(self, kind: str, row_id: int) -> Cursor:
        """This cursor moved past row ``row_id`` of ``kind``'s table ("event", "step" or
        "epoch"), never back."""
        if kind == "event":
            return Cursor(max(self.events, row_id), self.steps, self.epochs)
        if kind == "step":
            return Cursor(self.events, max(self.steps, row_id), self.epochs)
        return Cursor(self.events, self.steps, max(self.epochs, row_id))

    def low(self, other: Cursor) -> Cursor:
        return Cursor(
            min(self.events, other.events),
            min(self.steps, other.steps),
            min(self.epochs, other.epochs),
        )


@dataclass(frozen=True)
class Item:
    """One message for a job's subscribers: kind "event", "step", "epoch" or "job"."""

    job_id: str
    kind: str
    row_id: int  # 0 for "job" (a snapshot, always delivered)
    data: dict[str, Any]
    at: datetime | None = None  # when it happened: the order of rows written before places
    seq: int | None = None  # its place in the job's stream (``JobStream``): the order across tables


def _event(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "created_at": int(row.created_at.timestamp()),
        "kind": row.kind,
        "message": row.message,
    }


def _after(table: Any, cursors: dict[str, Cursor], field: str, bounds: dict[str, int]) -> Any:
    """Rows of the watched jobs past each job's own cursor (ids are per table, not per job) and
    not past its place read first (``bounds``; places start at 1, so a job without one has only
    rows written before places existed): whole writes only."""
    return or_(
        *(
            and_(
                table.job_id == j,
                table.id > getattr(c, field),
                or_(table.seq.is_(None), table.seq <= bounds.get(j, 0)),
            )
            for j, c in cursors.items()
        )
    )


def _read_tables(
    engine: Engine, cursors: dict[str, Cursor], *, limit: int | None = None
) -> list[list[Item]]:
    """Events, epoch and step records after each job's cursor, a list per table in id order,
    each at most ``limit`` rows.

    Each job's last place (``JobStream``) is read first, then the rows up to it. The three tables
    are three statements, and on PostgreSQL each sees what was committed when it began: a write
    that committed between them (an epoch's record and its event) would otherwise be read half
    in this poll and half in the next, in an order its replay does not give."""
    tables: list[list[Item]] = []
    with engine.connect() as connection:
        places = select(JobStream.job_id, JobStream.seq).where(JobStream.job_id.in_(list(cursors)))
        bounds = {row.job_id: row.seq for row in connection.execute(places)}
        events = select(JobEvent).where(
            _after(JobEvent, cursors, "events", bounds), JobEvent.kind != METRICS_EVENT
        )
        rows = connection.execute(events.order_by(JobEvent.id).limit(limit))
        tables.append([Item(r.job_id, "event", r.id, _event(r), r.created_at, r.seq) for r in rows])
        for kind, table, field in (("epoch", EpochMetric, "epochs"), ("step", StepMetric, "steps")):
            query = select(table.id, table.job_id, table.record, table.created_at, table.seq)
            rows = connection.execute(
                query.where(_after(table, cursors, field, bounds)).order_by(table.id).limit(limit)
            )
            tables.append([Item(r.job_id, kind, r.id, r.record, r.created_at, r.seq) for r in rows])
    return tables


RANK = {"step": 0, "epoch": 1, "event": 2}  # within one place (one write): steps, epoch, event


def _order(item: Item) -> tuple[Any, ...]:
    if item.seq is None:  # written before places existed: by time, as then
        return (0, 0, item.at or datetime.min, RANK[item.kind], item.row_id)
    return (1, item.seq, datetime.min, RANK[item.kind], item.row_id)


def _merged(tables: list[list[Item]]) -> Iterator[Item]:
    # Interleaved by place, each table kept in id order (a subscriber's cursor is the last id of
    # each; under the stream lock ids and places both follow commit order). Places, not times: a
    # worker stamps a report when it happens and writes it later, so a row can have a higher id
    # and an earlier time than one written meanwhile, and a live stream (which got that row
    # first) and its replay (which would sort it back by time) would disagree.
    return heapq.merge(*tables, key=_order)


def read_new(engine: Engine, cursors: dict[str, Cursor]) -> list[Item]:
    """Events, epoch and step records after each job's cursor, for all jobs in three queries,
    in the order they were written. (The hub's poll: what was written since its last tick.)"""
    if not cursors:
        return []
    return list(_merged(_read_tables(engine, cursors)))


def read_page(
    engine: Engine, *, job_id: str, since: Cursor, limit: int = HISTORY_PAGE
) -> tuple[list[Item], bool]:
    """One page of a job's history after ``since``: at most ``limit`` rows of each table, in the
    order ``read_new`` gives them all; (page, whether more may follow). The page ends where a
    table whose read was cut would next be needed, so pages laid end to end are that order."""
    tables = _read_tables(engine, {job_id: since}, limit=limit)
    cut = {(t[-1].kind, t[-1].row_id) for t in tables if len(t) == limit}
    page: list[Item] = []
    for item in _merged(tables):
        page.append(item)
        if (item.kind, item.row_id) in cut:
            return page, True
    return page, False


def read_snapshots(engine: Engine, job_ids: list[str]) -> dict[str, Any]:
    """The watched jobs' rows (status and progress), in one query."""
    query = select(*JOB_COLUMNS).where(Job.id.in_(job_ids))
    with engine.connect() as connection:
        return {row.id: row for row in connection.execute(query)}
