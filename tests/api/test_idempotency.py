"""Idempotency-Key on POST /v1/jobs (both databases): the same key and body give the same job,
the same key with another body is 409, and nothing is enqueued twice."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gradacc.settings import Settings
from tests.api.test_jobs import TINY, count_jobs


def queued_messages(settings: Settings) -> int:
    return len(list((settings.broker_dir / "queue").iterdir()))


def test_same_key_same_body_is_the_same_job(client: TestClient, db_settings: Settings) -> None:
    key = {"Idempotency-Key": "order-42"}
    first = client.post("/v1/jobs", json=TINY, headers=key)
    assert first.status_code == 201, first.text
    again = client.post("/v1/jobs", json=dict(reversed(TINY.items())), headers=key)
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    # Defaults spelled out are the same request: the key covers the validated spec.
    explicit = client.post("/v1/jobs", json={**TINY, "seed": 42}, headers=key)
    assert explicit.status_code == 200 and explicit.json()["id"] == first.json()["id"]
    assert count_jobs(db_settings) == 1
    assert queued_messages(db_settings) == 1


def test_same_key_other_body_is_409(client: TestClient, db_settings: Settings) -> None:
    key = {"Idempotency-Key": "order-43"}
    assert client.post("/v1/jobs", json=TINY, headers=key).status_code == 201
    other = client.post("/v1/jobs", json={**TINY, "seed": 7}, headers=key)
    assert other.status_code == 409
    assert other.json() == {
        "error": {
            "code": "idempotency_conflict",
            "message": "this Idempotency-Key was already used with a different request body",
            "param": "Idempotency-Key",
            "type": "invalid_request_error",
        }
    }
    # Another key, or none, is another job; a key that is too long is refused by name.
    assert client.post("/v1/jobs", json=TINY, headers={"Idempotency-Key": "b"}).status_code == 201
    assert client.post("/v1/jobs", json=TINY).status_code == 201
    too_long = client.post("/v1/jobs", json=TINY, headers={"Idempotency-Key": "k" * 256})
    assert too_long.status_code == 422
    assert too_long.json()["error"]["param"] == "Idempotency-Key"
    assert count_jobs(db_settings) == 3
    assert queued_messages(db_settings) == 3
