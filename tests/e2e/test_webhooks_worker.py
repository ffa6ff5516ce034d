"""Webhooks go out while no API process runs: every worker drains the outbox too. The job is
created through an app whose lifespan (and with it the API's own sender) never starts; a real
worker on PostgreSQL and Redis trains it, and its sender delivers the final status, signed, after
a failed first attempt."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.db import session_scope
from gradacc.jobs.webhook_outbox import SIGNATURE_HEADER, tenant_secret, verify
from gradacc.settings import Settings
from tests.conftest import TINY
from tests.e2e.conftest import StartWorker
from tests.support import wait_final, wait_until
from tests.webhook_receiver import Receiver, receiver

__all__ = ["receiver"]
pytestmark = pytest.mark.integration
FAST_WEBHOOKS = {"GRADACC_WEBHOOK_ALLOW_PRIVATE": "true", "GRADACC_WEBHOOK_RETRY_FIRST_S": "0.2",
                 "GRADACC_WEBHOOK_POLL_INTERVAL_S": "0.1"}  # fmt: skip


def test_a_worker_delivers_the_webhook_while_no_api_runs(
    pg_redis_settings: Settings, start_worker: StartWorker, receiver: Receiver
) -> None:
    settings = pg_redis_settings.model_copy(update={"webhook_allow_private": True})
    api = TestClient(create_app(settings))  # not entered: no lifespan, so no API-side sender
    spec = {**TINY, "webhook_url": f"{receiver.url}/ok"}
    job_id = api.post("/v1/jobs", json=spec).json()["id"]
    worker = start_worker("hooks", FAST_WEBHOOKS)
    assert wait_final(api, job_id, timeout=120)["status"] == "succeeded", worker.log()

    def delivered() -> list[bytes]:
        return [body for path, headers, body in receiver.received if path == "/ok"]

    bodies = wait_until(lambda: len(delivered()) >= 2 and delivered(), timeout=60,
                        what="the retried delivery")  # fmt: skip
    with session_scope(settings) as session:
        secret = tenant_secret(session, tenant="default")
    _, headers, body = receiver.received[-1]
    assert headers["Gradacc-Event"] == "job.succeeded"
    assert verify(secret, body, headers[SIGNATURE_HEADER], now=int(json.loads(body)["finished_at"]))
    assert json.loads(bodies[-1])["id"] == job_id
    # The sender records the delivery after the receiver answered: wait for its event.

    def delivered_event() -> bool:
        events = api.get(f"/v1/jobs/{job_id}/events").json()["data"]
        return any("delivered" in e["message"] for e in events if e["kind"] == "webhook")

    wait_until(delivered_event, timeout=60, what="the delivery's event")
