"""The /v1/jobs endpoints against a real database and the real filesystem broker (no worker)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job
from tests.conftest import TINY

# Every error body; a validation error adds "errors" (each field at fault).
SHAPE = {"code", "message", "param", "type"}


def count_jobs(settings: Settings) -> int:
    with session_scope(settings) as session:
        return session.scalar(select(func.count()).select_from(Job)) or 0


def test_create_commits_a_queued_job_and_enqueues_it(
    client: TestClient, db_settings: Settings
) -> None:
    response = client.post("/v1/jobs", json=TINY)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "queued"
    assert job["id"].startswith("job_")
    assert job["effective_batch_size"] == 16
    assert job["spec"]["gradient_accumulation_steps"] == 2
    assert job["progress"] == {"epoch": 0, "step": 0, "total_steps": None, "elapsed_seconds": None,
                               "eta_seconds": None, "samples_per_second": None, "train_loss": None}  # fmt: skip
    assert job["error"] is None and job["metrics"] is None
    assert client.get(f"/v1/jobs/{job['id']}").json() == job
    messages = list((db_settings.broker_dir / "queue").iterdir())
    assert len(messages) == 1 and job["id"] in messages[0].read_text()
    events = client.get(f"/v1/jobs/{job['id']}/events").json()["data"]
    assert [e["kind"] for e in events] == ["queued"]
    assert client.get(f"/v1/jobs/{job['id']}/metrics").json()["data"] == []


def test_invalid_spec_is_422_naming_the_field_and_leaves_no_row(
    client: TestClient, db_settings: Settings
) -> None:
    cases = {
        "gradient_accumulation_steps": {**TINY, "gradient_accumulation_steps": 0},
        "learning_rate": {**TINY, "learning_rate": -1.0},
        "backend": {**TINY, "backend": "tensorflow"},
        "surprise": {**TINY, "surprise": 1},
    }
    for field, body in cases.items():
        response = client.post("/v1/jobs", json=body)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert error["param"] == field
        assert field in error["message"]
    malformed = client.post(
        "/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert malformed.status_code == 422
    assert SHAPE <= set(malformed.json()["error"]) <= SHAPE | {"errors"}
    assert count_jobs(db_settings) == 0
    assert not any((db_settings.broker_dir / "queue").iterdir())


def test_errors_have_one_shape(client: TestClient) -> None:
    missing = client.get("/v1/jobs/job_nope")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {
            "code": "job_not_found",
            "message": "no job with id 'job_nope'",
            "param": "job_id",
            "type": "invalid_request_error",
        }
    }
    for path in ("/v1/jobs/job_nope/metrics", "/v1/jobs/job_nope/events"):
        assert client.get(path).json()["error"]["code"] == "job_not_found"
    no_route = client.get("/v1/nothing-here")
    assert no_route.status_code == 404
    assert no_route.json()["error"]["code"] == "not_found"
    wrong_method = client.delete("/v1/jobs")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"
    bad_query = client.get("/v1/jobs", params={"limit": 0})
    assert bad_query.status_code == 422
    assert bad_query.json()["error"]["param"] == "limit"


def test_cancel_of_a_queued_job_is_immediate_and_final(client: TestClient) -> None:
    job_id = client.post("/v1/jobs", json=TINY).json()["id"]
    cancelled = client.post(f"/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["finished_at"] is not None
    again = client.post(f"/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "invalid_transition"
    assert client.post("/v1/jobs/job_nope/cancel").status_code == 404
    kinds = [e["kind"] for e in client.get(f"/v1/jobs/{job_id}/events").json()["data"]]
    assert kinds == ["queued", "cancelled"]


def test_list_pages_newest_first_with_a_cursor(client: TestClient) -> None:
    ids = [client.post("/v1/jobs", json=TINY).json()["id"] for _ in range(5)]
    client.post(f"/v1/jobs/{ids[1]}/cancel")
    seen: list[str] = []
    after: str | None = None
    for _ in range(3):
        params: dict[str, Any] = {"limit": 2} | ({"after": after} if after else {})
        page = client.get("/v1/jobs", params=params).json()
        seen += [job["id"] for job in page["data"]]
        after = page["last_id"]
        if not page["has_more"]:
            break
    assert seen == list(reversed(ids))
    assert page["has_more"] is False
    cancelled = client.get("/v1/jobs", params={"status": "cancelled"}).json()
    assert [job["id"] for job in cancelled["data"]] == [ids[1]]
    assert client.get("/v1/jobs", params={"status": "exploded"}).status_code == 422


def test_the_poll_reads_outputs_from_the_row_not_the_disk(
    client: TestClient, db_settings: Settings
) -> None:
    """What a job wrote is recorded by its worker when it changes; a poll never walks the job's
    folder (it did, every file of every checkpoint, and answered a third as fast)."""
    job_id = client.post("/v1/jobs", json=TINY).json()["id"]
    folder = db_settings.jobs_dir / job_id
    folder.mkdir(parents=True)
    (folder / "train.log").write_text("written after the last record")
    assert client.get(f"/v1/jobs/{job_id}").json()["outputs"] == {}
    recorded = {"model": 1234, "summary.json": 56}
    with session_scope(db_settings) as session:
        session.get_one(Job, job_id).outputs = recorded
        session.commit()
    assert client.get(f"/v1/jobs/{job_id}").json()["outputs"] == recorded
    listed = client.get("/v1/jobs").json()["data"]
    assert [job["outputs"] for job in listed if job["id"] == job_id] == [recorded]
    # The files themselves are still listed as they are on disk.
    paths = [a["path"] for a in client.get(f"/v1/jobs/{job_id}/artifacts").json()["data"]]
    assert paths == ["train.log"]
