"""One ``fine_tuning.job`` shape: a fine-tuning job's stream (/v1/fine_tuning/jobs/{id}/stream)
sends, as each ``job`` snapshot, what retrieve and list return for it, from its history and live
(the hub's poll); /v1/jobs streams keep their own job object, and a /v1/jobs job is not on the
fine-tuning stream. No worker: jobs stay queued until cancelled."""

from __future__ import annotations

import json
import threading
from typing import Any, cast

import httpx
from fastapi.testclient import TestClient
from httpx_sse import connect_sse

from tests.api.test_fine_tuning_api import app_client, chat_file, sdk  # noqa: F401  (fixture)
from tests.conftest import TINY


def _create(client: TestClient) -> tuple[str, dict[str, str]]:
    alice = sdk(client, "alice")
    job = alice.fine_tuning.jobs.create(model="builtin:tiny-chat",
                                        training_file=chat_file(alice).id, suffix="s",
                                        metadata={"k": "v"})  # fmt: skip
    return job.id, {"Authorization": f"Bearer {alice.api_key}"}


def _snapshots(client: TestClient, url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    with connect_sse(cast(httpx.Client, client), "GET", url, headers=headers) as source:
        return [json.loads(m.data) for m in source.iter_sse() if m.event == "job"]


def test_a_snapshot_is_the_retrieved_job(app_client: TestClient) -> None:  # noqa: F811
    job_id, headers = _create(app_client)
    assert app_client.post(f"/v1/fine_tuning/jobs/{job_id}/cancel", headers=headers).is_success
    (snapshot,) = _snapshots(app_client, f"/v1/fine_tuning/jobs/{job_id}/stream", headers)
    retrieved = app_client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=headers).json()
    listed = app_client.get("/v1/fine_tuning/jobs", headers=headers).json()["data"]
    assert snapshot == retrieved == next(j for j in listed if j["id"] == job_id)
    assert snapshot["object"] == "fine_tuning.job" and snapshot["status"] == "cancelled"
    # /v1/jobs keeps its own object for the same job (a negative control for the comparison).
    (ours,) = _snapshots(app_client, f"/v1/jobs/{job_id}/stream", headers)
    assert ours == app_client.get(f"/v1/jobs/{job_id}", headers=headers).json() != snapshot
    plain = app_client.post("/v1/jobs", json=TINY, headers=headers).json()["id"]
    missing = app_client.get(f"/v1/fine_tuning/jobs/{plain}/stream", headers=headers)
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "job_id"


def test_a_live_snapshot_is_the_retrieved_job(app_client: TestClient) -> None:  # noqa: F811
    job_id, headers = _create(app_client)
    first, snapshots = threading.Event(), list[dict[str, Any]]()

    def watch() -> None:
        url = f"/v1/fine_tuning/jobs/{job_id}/stream"
        with connect_sse(cast(httpx.Client, app_client), "GET", url, headers=headers) as source:
            for message in source.iter_sse():
                if message.event == "job":
                    snapshots.append(json.loads(message.data))
                    first.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    assert first.wait(60)  # the snapshot at connect: queued, then the hub's poll sends the rest
    assert app_client.post(f"/v1/fine_tuning/jobs/{job_id}/cancel", headers=headers).is_success
    watcher.join(60)
    assert not watcher.is_alive()
    retrieved = app_client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=headers).json()
    assert snapshots[0]["status"] == "queued" and len(snapshots) >= 2
    assert snapshots[-1] == retrieved
