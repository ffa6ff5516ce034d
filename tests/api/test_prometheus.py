"""GET /metrics parsed with prometheus-client's own parser: job figures from the database and
HTTP latency by route, in one process and summed over several uvicorn workers."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from api.main import create_app
from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job, utcnow
from tests.conftest import ROOT, TINY
from tests.support import free_port, wait_until


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_show_jobs_and_request_latency(db_settings: Settings) -> None:
    with TestClient(create_app(db_settings)) as client:
        ids = [client.post("/v1/jobs", json=TINY).json()["id"] for _ in range(3)]
        with session_scope(db_settings) as session:
            now = utcnow()
            session.execute(update(Job).where(Job.id == ids[0]).values(
                status="succeeded", started_at=now - timedelta(seconds=20), finished_at=now))  # fmt: skip
            session.execute(update(Job).where(Job.id == ids[1]).values(
                status="running", started_at=now, live_progress={"samples_per_second": 250.0}))  # fmt: skip
            session.commit()
        client.get(f"/v1/jobs/{ids[0]}")
        response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    found = samples(response.text)
    assert found[("gradacc_jobs", (("status", "queued"),))] == 1
    assert found[("gradacc_jobs", (("status", "succeeded"),))] == 1
    assert found[("gradacc_queue_depth", ())] == 1 and found[("gradacc_running_jobs", ())] == 1
    assert found[("gradacc_training_samples_per_second", ())] == 250.0
    assert found[("gradacc_job_duration_seconds_bucket", (("le", "15.0"),))] == 0
    assert found[("gradacc_job_duration_seconds_bucket", (("le", "30.0"),))] == 1
    assert 19 < found[("gradacc_job_duration_seconds_sum", ())] < 21
    assert found[("gradacc_job_time_to_start_seconds_count", ())] == 2
    route = (("method", "GET"), ("route", "/v1/jobs/{job_id}"), ("status", "200"))
    assert found[("gradacc_http_request_duration_seconds_count", route)] >= 1


def wait_alive(client: httpx.Client, timeout_s: float = 60) -> None:
    def alive() -> bool:
        try:
            return client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    wait_until(alive, timeout=timeout_s, what="uvicorn's /healthz", every=0.2)


def test_multiprocess_mode_sums_every_worker(embedded_settings: Settings, tmp_path: Path) -> None:
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    env = {**os.environ, "GRADACC_HOME": str(embedded_settings.home),
           "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}  # fmt: skip
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "api.main:app", "--port", str(port), "--workers", "2",
         "--log-level", "warning"], cwd=ROOT, env=env)  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            wait_alive(client)  # /readyz would wait for a worker; none is needed here
            sent = 0

            def both_answered() -> bool:
                # New connections, until each worker has answered one (a file each). On a busy
                # machine the second worker can start after the first took 20 in a row.
                nonlocal sent
                for _ in range(20):
                    httpx.get(f"http://127.0.0.1:{port}/healthz")
                sent += 20
                return len(list(multiproc.glob("histogram_*.db"))) == 2

            wait_until(both_answered, timeout=60, what="both workers answering")
            text = client.get("/metrics").text
    finally:
        server.terminate()
        server.wait(30)
    route = (("method", "GET"), ("route", "/healthz"), ("status", "200"))
    # Those sent, and the one answered /healthz of wait_alive (refused connections reach no worker).
    assert samples(text)[("gradacc_http_request_duration_seconds_count", route)] == sent + 1
    assert len(list(multiproc.glob("histogram_*.db"))) == 2  # one file per worker process


def test_metrics_answer_without_a_key_and_name_no_tenant_or_job(db_settings: Settings) -> None:
    """What docs/security.md promises of an open /metrics while API keys are on: aggregates only."""
    settings = db_settings.model_copy(update={"require_auth": True})
    with session_scope(settings) as session:
        key = create_api_key(session, tenant="acme-secret-tenant")
    with TestClient(create_app(settings)) as client:
        headers = {"Authorization": f"Bearer {key}"}
        ids = [client.post("/v1/jobs", json=TINY, headers=headers).json()["id"] for _ in range(2)]
        assert client.get("/v1/jobs").status_code == 401  # the API itself is closed
        client.get(f"/v1/jobs/{ids[0]}", headers=headers)
        response = client.get("/metrics")
    assert response.status_code == 200
    assert samples(response.text)[("gradacc_jobs", (("status", "queued"),))] == 2
    for secret in ["acme-secret-tenant", key, *ids, *(i.removeprefix("job_") for i in ids)]:
        assert secret not in response.text


def test_a_metrics_token_closes_metrics(db_settings: Settings) -> None:
    token = "scrape-" + "t" * 24
    settings = db_settings.model_copy(update={"metrics_token": token})
    with TestClient(create_app(settings)) as client:
        missing = client.get("/metrics")
        wrong = client.get("/metrics", headers={"Authorization": "Bearer scrape-wrong-token-x"})
        right = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert missing.status_code == wrong.status_code == 401
    assert missing.json()["error"]["code"] == "unauthorized"
    assert right.status_code == 200 and "gradacc_jobs" in right.text
