"""The job stream's history on each database: every event, epoch and step row reaches a
subscriber, even when rows' times are not in the order of their ids (a worker stamps a report when
it happens and writes it later, so a later row can carry an earlier time)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from httpx_sse import connect_sse
from sqlalchemy import func, select

from api.stream.reads import Cursor, read_new
from gradacc.db import get_read_engine, session_scope
from gradacc.jobs.records import add_event
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
    writers of one job's rows take turns until commit instead (``gradacc.jobs.states.lock_job_stream``).
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
        streamed = read_new(engine, {job_id: cursor})
        for item in streamed:  # the hub advances its cursor over what it read
            cursor = Cursor(events=max(cursor.events, item.row_id))
        first.commit()
    writer.join(timeout=30)
    assert not writer.is_alive()
    streamed += read_new(engine, {job_id: cursor})
    assert [item.data["kind"] for item in streamed] == ["first", "second"]
