"""A job's optional name and metadata: stored, shown by GET and the list, and filtered on (both
databases); bad ones are 422 naming the field and leave no job."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.test_jobs import TINY


def test_names_and_metadata_are_shown_and_filtered(client: TestClient) -> None:
    made = {}
    for name, team in (("sweep-1", "a"), ("sweep-2", "a"), ("other", "b")):
        reply = client.post("/v1/jobs", json={**TINY, "name": name, "metadata": {"team": team}})
        assert reply.status_code == 201, reply.text
        assert reply.json()["name"] == name and reply.json()["metadata"] == {"team": team}
        made[name] = reply.json()["id"]
    plain = client.post("/v1/jobs", json=TINY).json()
    assert plain["name"] is None and plain["metadata"] is None
    shown = client.get(f"/v1/jobs/{made['sweep-2']}").json()
    assert shown["name"] == "sweep-2" and shown["metadata"] == {"team": "a"}
    assert "name" not in shown["spec"] and "metadata" not in shown["spec"]

    def listed(query: str) -> set[str]:
        return {job["id"] for job in client.get(f"/v1/jobs?{query}").json()["data"]}

    assert listed("name=other") == {made["other"]}
    assert listed("metadata[team]=a") == {made["sweep-1"], made["sweep-2"]}
    assert listed("metadata[team]=a&name=sweep-1") == {made["sweep-1"]}
    assert listed("metadata[team]=c") == set()
    assert client.get("/v1/jobs?metadata=team").status_code == 422


def test_bad_names_and_metadata_are_refused(client: TestClient) -> None:
    before = len(client.get("/v1/jobs?limit=100").json()["data"])
    cases = [
        ({"name": "x" * 129}, "name"),
        ({"name": ""}, "name"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata.k"),
        ({"metadata": {"k": 3}}, "metadata.k"),
    ]
    for extra, param in cases:
        reply = client.post("/v1/jobs", json={**TINY, **extra})
        assert reply.status_code == 422, extra
        assert reply.json()["error"]["param"] == param, reply.json()
    assert len(client.get("/v1/jobs?limit=100").json()["data"]) == before
