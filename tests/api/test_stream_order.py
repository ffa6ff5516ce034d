"""The job stream's history on each database: every event, epoch and step row reaches a
subscriber, even when rows' times are not in the order of their ids (a worker stamps a report when
it happens and writes it later, so a later row can carry an earlier time)."""

from __future__ import annotations

import json
from datetime import timedelta

from fastapi.testclient import TestClient
from httpx_sse import connect_sse

from gradacc.db import session_scope
from gradacc.jobs import add_event
from gradacc.models import utcnow
from gradacc.settings import Settings
from tests.conftest import TINY


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
