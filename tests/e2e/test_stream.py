"""The job stream (Server-Sent Events) on a live job: a real Celery worker on PostgreSQL and
Redis trains a tiny job while the test reads its stream from the first message to the final
status, then resumes it from the middle with Last-Event-ID."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx_sse import ServerSentEvent, connect_sse

from tests.conftest import TINY
from tests.e2e.conftest import WorkerProcess

pytestmark = pytest.mark.integration


def read_stream(api: TestClient, job_id: str, last_id: str | None = None) -> list[ServerSentEvent]:
    headers = {"Last-Event-ID": last_id} if last_id else {}
    url = f"/v1/jobs/{job_id}/stream"
    with connect_sse(api, "GET", url, headers=headers, timeout=120) as source:
        assert source.response.headers["content-type"].startswith("text/event-stream")
        # httpx-sse hands keep-alive comments over as empty messages: not ours.
        return [message for message in source.iter_sse() if message.data]


def test_a_live_jobs_stream_from_first_event_to_succeeded(
    api: TestClient, start_worker: Callable[[str], WorkerProcess]
) -> None:
    start_worker("stream-worker")
    job_id = api.post("/v1/jobs", json={**TINY, "logging_steps": 1}).json()["id"]
    messages = read_stream(api, job_id)
    kinds = [m.event for m in messages]
    data: list[dict[str, Any]] = [json.loads(m.data) for m in messages]
    assert kinds[0] == "event" and data[0]["kind"] == "queued"
    assert kinds[-1] == "job" and data[-1]["status"] == "succeeded"
    steps = [d["step"] for k, d in zip(kinds, data, strict=True) if k == "step"]
    assert steps == [1, 2, 3, 4]  # 64 rows, windows of 16, a record every step
    epochs = [d for k, d in zip(kinds, data, strict=True) if k == "epoch"]
    assert len(epochs) == 1 and epochs[0]["train_loss"] > 0
    events = [d["kind"] for k, d in zip(kinds, data, strict=True) if k == "event"]
    assert events[0] == "queued" and events[-1] == "succeeded" and "training" in events
    assert kinds.index("epoch") > max(i for i, k in enumerate(kinds) if k == "step")
    ids = [m.id for m in messages]
    assert all(ids) and len(set(ids)) >= len(steps) + len(events)

    # Resuming after the second step record gives exactly what followed it, then ends.
    middle = kinds.index("step") + 1
    resumed = read_stream(api, job_id, last_id=messages[middle].id)
    tail = [(m.event, m.data) for m in messages[middle + 1 :] if m.event != "job"]
    assert [(m.event, m.data) for m in resumed if m.event != "job"] == tail
    assert json.loads(resumed[-1].data)["status"] == "succeeded"


def test_stream_of_an_unknown_job_is_404_and_a_bad_last_event_id_422(api: TestClient) -> None:
    missing = api.get("/v1/jobs/job_00000000000000000000/stream")
    assert missing.status_code == 404 and missing.json()["error"]["code"]
    job_id = api.post("/v1/jobs", json=TINY).json()["id"]
    api.post(f"/v1/jobs/{job_id}/cancel")
    bad = api.get(f"/v1/jobs/{job_id}/stream", headers={"Last-Event-ID": "x"})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "Last-Event-ID"
    final = read_stream(api, job_id)  # a finished job: its history and status, then the end
    assert final[-1].event == "job" and json.loads(final[-1].data)["status"] == "cancelled"
    # Past every row id (and past PostgreSQL's 32-bit ids, a 500 once): nothing but the status.
    past = read_stream(api, job_id, last_id=f"{2**45}-{2**45}-{2**45}")
    assert [m.event for m in past] == ["job"]
