"""The job stream's history on each database: every event, epoch and step row reaches a
subscriber, even when rows' times are not in the order of their ids (a worker stamps a report when
it happens and writes it later, so a later row can carry an earlier time)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from httpx_sse import connect_sse
from sqlalchemy import Engine, event, func, select

from api.stream.reads import Cursor, Item, read_new, read_page
from gradacc.db import get_read_engine, session_scope
from gradacc.jobs.records import add_event, record_epoch_metrics, record_step_metrics
from gradacc.settings import Settings
from gradacc.tables import JobEvent, utcnow
from tests.conftest import TINY
from tests.support import make_job


def test_rows_written_out_of_time_order_all_reach_the_stream(
    client: TestClient, db_settings: Settings
) -> None:
    job_id = client.post("/v1/jobs", json=TINY).json()["id"]
    now = utcnow()
    with session_scope(db_settings) as session:
        add_event(session, job_id=job_id, kind="late", message="written first", at=now)
        session.commit()
    with session_scope(db_settings) as session:  # a higher id, stamped a minute earlier
        add_event(session, job_id=job_id, kind="early", message="written second",
                  at=now - timedelta(minutes=1))  # fmt: skip
        session.commit()
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    with connect_sse(client, "GET", f"/v1/jobs/{job_id}/stream") as source:
        messages = [m for m in source.iter_sse() if m.data]
    streamed = [json.loads(m.data)["kind"] for m in messages if m.event == "event"]
    logged = [e["kind"] for e in client.get(f"/v1/jobs/{job_id}/events").json()["data"]]
    assert sorted(streamed) == sorted(logged) and {"queued", "late", "early", "cancelled"} <= set(
        streamed
    )
    assert messages[-1].event == "job" and json.loads(messages[-1].data)["status"] == "cancelled"


def test_a_row_that_commits_after_a_higher_id_still_reaches_the_stream(
    pg_url: str, tmp_path: Path
) -> None:
    """PostgreSQL hands out ids when rows are inserted, not when they commit. The stream's cursor
    is the last id sent, so a row committed after a higher id was read would never be sent; the
    writers of one job's rows take turns until commit instead (``gradacc.jobs.records.next_stream_place``).
    Here transaction A takes an id and holds it uncommitted while B tries to write after it."""
    settings = Settings(home=tmp_path, database_url=pg_url)
    job_id = make_job(settings)
    engine = get_read_engine(pg_url)
    with session_scope(settings) as first:
        add_event(first, job_id=job_id, kind="first", message="an id taken, not yet committed")
        first.flush()
        taken = first.scalar(select(func.max(JobEvent.id)).where(JobEvent.job_id == job_id))
        assert taken is not None
        cursor = Cursor(events=taken - 1)  # a subscriber that has everything before it

        def write_second() -> None:
            with session_scope(settings) as second:
                add_event(second, job_id=job_id, kind="second", message="committed first?")
                second.commit()

        writer = threading.Thread(target=write_second)
        writer.start()
        writer.join(timeout=1.0)  # without the turn-taking it commits here, ahead of "first"
        streamed: list[Item] = []
        cursor = _live(engine, job_id, cursor, streamed)
        first.commit()
    writer.join(timeout=30)
    assert not writer.is_alive()
    _live(engine, job_id, cursor, streamed)
    assert [item.data["kind"] for item in streamed] == ["first", "second"]


def _live(engine: Engine, job_id: str, cursor: Cursor, items: list[Item]) -> Cursor:
    """One poll of the hub: what it reads after ``cursor``, appended; the cursor after it."""
    for item in read_new(engine, {job_id: cursor}):
        items.append(item)
        cursor = cursor.past(item.kind, item.row_id)
    return cursor


def _replay(engine: Engine, job_id: str) -> list[tuple[str, int]]:
    page, more = read_page(engine, job_id=job_id, since=Cursor())
    assert not more
    return [(item.kind, item.row_id) for item in page]


def test_a_live_stream_and_its_replay_give_the_same_order(db_settings: Settings) -> None:
    """A worker stamps an event when it happens and writes it later, after step records stamped
    when written: by time, a replay put the event before steps that a live subscriber had been
    sent first (``test_stream.py`` failed so, once in two copies of the suite). Here: steps; an
    event stamped a minute earlier; an epoch's record and its event in one write, as the worker's
    reporter writes them; a poll after each. The replay equals the live order."""
    settings = db_settings
    job_id = make_job(settings)
    engine = get_read_engine(settings.resolved_database_url())
    live: list[Item] = []
    cursor = _live(engine, job_id, Cursor(), live)
    earlier = utcnow() - timedelta(minutes=1)
    with session_scope(settings) as session:
        record_step_metrics(session, job_id=job_id, records=[{"step": 1}, {"step": 2}])
        session.commit()
    cursor = _live(engine, job_id, cursor, live)
    with session_scope(settings) as session:
        add_event(session, job_id=job_id, kind="checkpoint", message="stamped early", at=earlier)
        session.commit()
    cursor = _live(engine, job_id, cursor, live)
    with session_scope(settings) as session:
        record_epoch_metrics(session, job_id=job_id, record={"epoch": 1, "train_loss": 0.5})
        add_event(session, job_id=job_id, kind="epoch", message="epoch 1 done", at=earlier)
        session.commit()
    _live(engine, job_id, cursor, live)
    kinds = [(item.kind, item.data.get("kind")) for item in live]
    assert kinds == [("step", None), ("step", None), ("event", "checkpoint"), ("epoch", None),
                     ("event", "epoch")]  # fmt: skip
    assert _replay(engine, job_id) == [(item.kind, item.row_id) for item in live]


def test_a_poll_never_reads_half_of_a_write(pg_url: str, tmp_path: Path) -> None:
    """PostgreSQL: each of a poll's three reads sees what was committed when it began. A write
    (an event, then step records) that commits between the events read and the steps read was
    read half in one poll (its steps) and half in the next (its event): live, the steps came
    first; replayed, the event. The poll reads the job's last place first and no row past it."""
    settings = Settings(home=tmp_path, database_url=pg_url)
    job_id = make_job(settings)
    engine = get_read_engine(pg_url)
    with session_scope(settings) as session:
        add_event(session, job_id=job_id, kind="queued", message="queued")
        session.commit()
    written: list[bool] = []

    def write_between(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM job_events" in statement and not written:
            written.append(True)
            with session_scope(settings) as session:
                add_event(session, job_id=job_id, kind="checkpoint", message="first in the write")
                record_step_metrics(session, job_id=job_id, records=[{"step": 1}])
                session.commit()

    live: list[Item] = []
    cursor = _live(engine, job_id, Cursor(), live)
    event.listen(engine.engine, "after_cursor_execute", write_between)
    try:
        cursor = _live(engine, job_id, cursor, live)
    finally:
        event.remove(engine.engine, "after_cursor_execute", write_between)
    assert written and [item.kind for item in live] == ["event"]  # "queued" alone: not the step
    _live(engine, job_id, cursor, live)
    assert [(item.kind, item.data.get("kind")) for item in live] == [
        ("event", "queued"), ("event", "checkpoint"), ("step", None)]  # fmt: skip
    assert _replay(engine, job_id) == [(item.kind, item.row_id) for item in live]
