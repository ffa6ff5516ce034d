"""What one tenant's streams may cost the API: a job's history is read and sent in pages
(``api.stream.reads.read_page``), never whole, and a tenant holds at most
``max_streams_per_tenant`` open streams per process (more: 429 naming the setting). The open
streams are held by a real HTTP client against a real server (uvicorn in a thread)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from httpx_sse import connect_sse
from sqlalchemy import insert

import api.stream.hub as stream_hub
from api.main import create_app
from api.stream.reads import Cursor, Item, read_new, read_page
from gradacc.auth import create_api_key
from gradacc.db import get_read_engine, session_scope
from gradacc.jobs.records import add_event
from gradacc.settings import Settings
from gradacc.tables import EpochMetric, StepMetric, utcnow
from tests.conftest import TINY
from tests.support import served_in_thread, wait_until

STEPS = 1_200
PAGE = 100


@pytest.fixture
def server(db_settings: Settings) -> Iterator[tuple[str, FastAPI, Settings]]:
    settings = db_settings.model_copy(update={"require_auth": True, "max_streams_per_tenant": 2})
    app = create_app(settings)
    with served_in_thread(app) as url:
        yield url, app, settings


def headers(settings: Settings, tenant: str) -> dict[str, str]:
    with session_scope(settings) as session:
        return {"Authorization": f"Bearer {create_api_key(session, tenant=tenant)}"}


def open_stream(stack: ExitStack, client: httpx.Client, job_id: str) -> httpx.Response:
    """A stream held open until ``stack`` closes: answered, and its first line received (its
    line iterator is kept: dropping it would close the connection)."""
    response = stack.enter_context(client.stream("GET", f"/v1/jobs/{job_id}/stream"))
    if response.status_code == 200:
        lines = response.iter_lines()
        next(lines)
        stack.callback(lines.close)
    return response


def test_a_tenant_over_its_open_streams_is_429(server: tuple[str, FastAPI, Settings]) -> None:
    url, app, settings = server
    alice = httpx.Client(base_url=url, headers=headers(settings, "alice"), timeout=30)
    bob = httpx.Client(base_url=url, headers=headers(settings, "bob"), timeout=30)
    queued = alice.post("/v1/jobs", json=TINY).json()["id"]  # no worker: it stays queued
    other = alice.post("/v1/jobs", json=TINY).json()["id"]
    theirs = bob.post("/v1/jobs", json=TINY).json()["id"]
    with ExitStack() as stack:
        first = open_stream(stack, alice, queued)
        second = open_stream(stack, alice, other)
        assert (first.status_code, second.status_code) == (200, 200)
        refused = alice.get(f"/v1/jobs/{queued}/stream")
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "too_many_streams"
        assert error["param"] == "GRADACC_MAX_STREAMS_PER_TENANT"
        assert open_stream(stack, bob, theirs).status_code == 200  # per tenant
        assert alice.get("/v1/jobs/job_00000000000000000000/stream").status_code == 404
        # A stream that ends (its job cancelled) gives its place back.
        alice.post(f"/v1/jobs/{other}/cancel")
        wait_until(lambda: app.state.stream_hub.open_streams["alice"] == 1, timeout=30,
                   what="the ended stream's place")  # fmt: skip
        assert open_stream(stack, alice, other).status_code == 200
    # Closed by the client: every place comes back.
    wait_until(lambda: not app.state.stream_hub.open_streams, timeout=30, what="closed streams")


def test_a_long_history_streams_whole_and_in_order_in_bounded_pages(
    client: TestClient, db_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = client.post("/v1/jobs", json=TINY).json()["id"]
    start = utcnow()
    with session_scope(db_settings) as session:
        rows = [{"job_id": job_id, "step": s, "record": {"step": s},
                 "created_at": start + timedelta(milliseconds=s)} for s in range(1, STEPS + 1)]  # fmt: skip
        session.execute(insert(StepMetric), rows)
        session.commit()
    client.post(f"/v1/jobs/{job_id}/cancel")
    pages: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> tuple[list[Item], bool]:
        page, more = read_page(*args, **kwargs)
        pages.append(len(page))
        return page, more

    monkeypatch.setattr(stream_hub, "read_page", counted)
    client.app.state.stream_hub.page_size = PAGE  # type: ignore[attr-defined]
    with connect_sse(client, "GET", f"/v1/jobs/{job_id}/stream") as source:
        messages = [m for m in source.iter_sse() if m.data]
    steps = [json.loads(m.data)["step"] for m in messages if m.event == "step"]
    assert steps == list(range(1, STEPS + 1))
    assert max(pages) <= 3 * PAGE and len(pages) >= STEPS // PAGE  # never the whole history
    assert messages[-1].event == "job" and json.loads(messages[-1].data)["status"] == "cancelled"


def test_pages_end_to_end_are_the_whole_read_in_its_order(
    client: TestClient, db_settings: Settings
) -> None:
    """Three tables whose times interleave, and rows stamped earlier than rows before them: the
    pages, laid end to end, are exactly what one unbounded read gives."""
    job_id = client.post("/v1/jobs", json=TINY).json()["id"]
    start = utcnow()
    with session_scope(db_settings) as session:
        for i in range(40):
            at = start + timedelta(seconds=(i * 7) % 23)  # out of id order now and then
            if i % 3 == 0:
                add_event(session, job_id=job_id, kind=f"e{i}", message="m", at=at)
            elif i % 3 == 1:
                session.add(StepMetric(job_id=job_id, step=i, record={"i": i}, created_at=at))
            else:
                session.add(EpochMetric(job_id=job_id, epoch=i, record={"i": i}, created_at=at))
            session.flush()
        session.commit()
    engine = get_read_engine(db_settings.resolved_database_url())
    whole = read_new(engine, {job_id: Cursor()})
    for limit in (1, 2, 5):
        paged, cursor, more = [], Cursor(), True
        while more:
            page, more = read_page(engine, job_id=job_id, since=cursor, limit=limit)
            assert len(page) <= 3 * limit
            paged += page
            for item in page:
                cursor = _after(cursor, item)
        assert [(i.kind, i.row_id) for i in paged] == [(i.kind, i.row_id) for i in whole]


def _after(cursor: Cursor, item: Item) -> Cursor:
    subscriber = stream_hub.Subscriber(item.job_id, cursor)
    subscriber.wants(item)
    return subscriber.cursor
