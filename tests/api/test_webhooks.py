"""Webhooks end to end through the outbox: a local receiver verifies every signature, sees a
failed attempt retried, the epoch and the final status; a receiver that stays down is given up
on; private, loopback and non-allowed hosts are refused at POST (no request forgery)."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from api.main import create_app
from gradacc.db import session_scope
from gradacc.jobs.states import transition_job
from gradacc.jobs.webhook_outbox import SIGNATURE_HEADER, verify
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, utcnow
from tests.conftest import TINY
from tests.support import wait_until
from tests.webhook_receiver import Receiver, receiver

__all__ = ["receiver"]  # the fixture, used by the tests below
from worker.child.reporting import DatabaseCallback


def fast(settings: Settings, **more: Any) -> Settings:
    return settings.model_copy(update={"webhook_allow_private": True, "webhook_retry_first_s": 0.2,
                                       "webhook_poll_interval_s": 0.1, **more})  # fmt: skip


def finish(settings: Settings, job_id: str, *, epoch: bool) -> None:
    """What the training process does: an epoch record, then the final status."""
    with session_scope(settings) as session:
        transition_job(session, job_id=job_id, to=JobStatus.RUNNING, started_at=utcnow())
        session.commit()
    if epoch:
        DatabaseCallback(settings, job_id).on_epoch_end({"epoch": 1, "train_loss": 0.5})
    with session_scope(settings) as session:
        transition_job(session, job_id=job_id, to=JobStatus.SUCCEEDED, finished_at=utcnow())
        session.commit()


def test_signed_deliveries_with_a_retry(db_settings: Settings, receiver: Receiver) -> None:
    settings = fast(db_settings)
    with TestClient(create_app(settings)) as client:
        secret = client.get("/v1/webhook_secret").json()["secret"]
        assert client.get("/v1/webhook_secret").json()["secret"] == secret  # stable per tenant
        body = {**TINY, "webhook_url": f"{receiver.url}/ok", "webhook_on_epoch": True}
        job = client.post("/v1/jobs", json=body).json()
        assert job["webhook_url"] == f"{receiver.url}/ok" and "webhook_url" not in job["spec"]
        finish(settings, job["id"], epoch=True)
        url = f"/v1/jobs/{job['id']}/events"
        # An epoch and the final status (the first attempt fails), each outcome an event.
        wait_until(
            lambda: client.get(url).text.count("delivered") == 2,
            what="two deliveries",
            timeout=30,
            every=0.05,
        )
        events = [e["message"] for e in client.get(url).json()["data"]]
    deliveries = receiver.received
    for _, headers, raw in deliveries:
        assert verify(secret, raw, headers[SIGNATURE_HEADER], now=int(time.time()))
        assert not verify(secret, raw + b" ", headers[SIGNATURE_HEADER], now=int(time.time()))
        assert json.loads(raw)["id"] == job["id"]
    kinds = [headers["Gradacc-Event"] for _, headers, _ in deliveries]
    assert sorted(set(kinds)) == ["job.epoch", "job.succeeded"]  # the first try of one failed
    final = next(
        json.loads(raw) for _, h, raw in deliveries if h["Gradacc-Event"] == "job.succeeded"
    )
    assert final["status"] == "succeeded" and final["object"] == "job"
    assert any("attempt 1: HTTP 500; retry in" in m for m in events), events
    assert len(deliveries) == 3


def test_a_receiver_that_stays_down_is_given_up(db_settings: Settings, receiver: Receiver) -> None:
    settings = fast(db_settings, webhook_max_attempts=2)
    with TestClient(create_app(settings)) as client:
        job = client.post("/v1/jobs", json={**TINY, "webhook_url": f"{receiver.url}/down"}).json()
        finish(settings, job["id"], epoch=True)  # no epoch webhook: not asked for
        url = f"/v1/jobs/{job['id']}/events"
        wait_until(
            lambda: "giving up" in client.get(url).text,
            what="two attempts, then giving up",
            timeout=30,
            every=0.05,
        )
    assert [h["Gradacc-Event"] for _, h, _ in receiver.received] == ["job.succeeded"] * 2


@pytest.mark.parametrize(
    ("url", "allowed", "reason"),
    [
        ("http://127.0.0.1:9/hook", None, "private or loopback"),
        ("http://[::1]/hook", None, "private or loopback"),
        ("http://10.1.2.3/hook", None, "private or loopback"),
        ("http://other.example/hook", "hooks.example", "not in the allowed"),
        ("ftp://hooks.example/x", None, "http:// or https://"),
        ("http://user:pw@hooks.example/x", None, "credentials"),
    ],
)
def test_forbidden_urls_are_refused_and_leave_no_job(
    db_settings: Settings, url: str, allowed: str | None, reason: str
) -> None:
    settings = db_settings.model_copy(update={"webhook_allowed_hosts": allowed})
    with TestClient(create_app(settings)) as client:
        response = client.post("/v1/jobs", json={**TINY, "webhook_url": url})
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["param"] == "webhook_url" and reason in error["message"]
        assert client.get("/v1/jobs").json()["data"] == []


def test_a_delivery_goes_to_the_address_that_was_checked(
    db_settings: Settings, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the name answers the receiver's address when it is checked, another one
    afterwards. The delivery connects to the checked address (it would time out on the other),
    with the name in its Host header."""
    real_getaddrinfo = socket.getaddrinfo
    answers: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "hooks.rebind.test":
            return real_getaddrinfo(host, port, *args, **kwargs)
        address = "127.0.0.1" if not answers else "10.255.255.1"  # the second: nowhere
        answers.append(address)
        return real_getaddrinfo(address, port, *args, **kwargs)

    port = receiver.server_address[1]
    settings = fast(db_settings, webhook_timeout_s=2.0, webhook_max_attempts=1)
    with TestClient(create_app(settings)) as client:
        job = client.post("/v1/jobs", json={**TINY, "webhook_url": f"http://127.0.0.1:{port}/ok"})
        job_id = job.json()["id"]
        with session_scope(settings) as session:  # the name the receiver will be reached by
            session.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(webhook_url=f"http://hooks.rebind.test:{port}/ok")
            )
            session.commit()
        receiver.fail_first = 0
        monkeypatch.setattr(socket, "getaddrinfo", rebinding)
        finish(settings, job_id, epoch=False)
        url = f"/v1/jobs/{job_id}/events"
        wait_until(
            lambda: "webhook" in client.get(url).text,
            what="one delivery attempt",
            timeout=30,
            every=0.05,
        )
        messages = [e["message"] for e in client.get(url).json()["data"] if e["kind"] == "webhook"]
    assert answers[0] == "127.0.0.1"
    assert len(receiver.received) == 1, messages
    assert receiver.received[0][1]["Host"] == f"hooks.rebind.test:{port}"
