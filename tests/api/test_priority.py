"""A job's priority at POST (bounded by GRADACC_MAX_PRIORITY and the schema), and where a queued
job stands in the job object and the list, on each database (no worker runs here)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gradacc.settings import Settings
from tests.api.test_jobs import count_jobs
from tests.conftest import TINY


def test_priority_above_the_limit_is_422_naming_it_and_leaves_no_job(
    client: TestClient, db_settings: Settings
) -> None:
    limit = db_settings.max_priority
    for value in (limit + 1, 1001, -1001, "high", 2.5):
        response = client.post("/v1/jobs", json={**TINY, "priority": value})
        assert response.status_code == 422, (value, response.text)
        assert response.json()["error"]["param"] == "priority", value
    assert (
        "GRADACC_MAX_PRIORITY"
        in client.post("/v1/jobs", json={**TINY, "priority": limit + 1}).json()["error"]["message"]
    )
    assert count_jobs(db_settings) == 0
    assert not any((db_settings.broker_dir / "queue").iterdir())
    schema = client.get("/openapi.json").json()["components"]["schemas"]["JobCreate"]
    assert schema["properties"]["priority"]["maximum"] == limit  # the contract says so


def test_queued_jobs_show_their_position_best_first(client: TestClient) -> None:
    low = client.post("/v1/jobs", json={**TINY, "priority": -5}).json()
    plain = client.post("/v1/jobs", json=TINY).json()
    high = client.post("/v1/jobs", json={**TINY, "priority": 10}).json()
    assert (low["priority"], plain["priority"], high["priority"]) == (-5, 0, 10)
    assert "priority" not in high["spec"]  # the service's field, not the core's
    assert [job["queue_position"] for job in (low, plain, high)] == [1, 1, 1]  # each the best
    shown = {j["id"]: j["queue_position"] for j in client.get("/v1/jobs").json()["data"]}
    assert shown == {high["id"]: 1, plain["id"]: 2, low["id"]: 3}
    assert client.get(f"/v1/jobs/{low['id']}").json()["queue_position"] == 3
    assert client.get(f"/v1/jobs/{low['id']}").json()["estimated_start"] is None  # no worker
    client.post(f"/v1/jobs/{high['id']}/cancel")
    after = client.get(f"/v1/jobs/{high['id']}").json()
    assert (after["status"], after["queue_position"]) == ("cancelled", None)
    assert client.get(f"/v1/jobs/{low['id']}").json()["queue_position"] == 2
