"""A fine-tuning job's webhooks as OpenAI sends them: a local receiver gets OpenAI's event object
with Standard Webhooks headers, and the openai SDK's ``client.webhooks.unwrap`` (with the
tenant's secret from ``GET /v1/webhook_secret``) returns the succeeded, failed and cancelled
events naming the ftjob; a tampered body, or another secret, does not unwrap. A /v1/jobs webhook
keeps its job object and ``Gradacc-Signature`` and carries the same Standard Webhooks headers."""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Iterator

import openai
import pytest
from fastapi.testclient import TestClient
from openai.types.webhooks import (
    FineTuningJobCancelledWebhookEvent,
    FineTuningJobFailedWebhookEvent,
    FineTuningJobSucceededWebhookEvent,
)

from api.main import create_app
from gradacc.db import session_scope
from gradacc.jobs.standard_webhooks import signing_key
from gradacc.jobs.states import transition_job
from gradacc.jobs.webhook_outbox import SIGNATURE_HEADER, verify
from gradacc.settings import Settings
from gradacc.tables import JobStatus, WebhookSecret, utcnow
from tests.api.test_fine_tuning_api import chat_file, sdk
from tests.conftest import TINY
from tests.support import wait_until
from tests.webhook_receiver import Receiver, receiver

__all__ = ["receiver"]  # the fixture, used by the tests below
EVENTS = {"succeeded": FineTuningJobSucceededWebhookEvent,
          "failed": FineTuningJobFailedWebhookEvent,
          "cancelled": FineTuningJobCancelledWebhookEvent}  # fmt: skip
FINE_TUNING_EVENTS = (FineTuningJobSucceededWebhookEvent, FineTuningJobFailedWebhookEvent,
                      FineTuningJobCancelledWebhookEvent)  # fmt: skip
UNWRAPPER = openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")


@pytest.fixture
def app_client(db_settings: Settings) -> Iterator[TestClient]:
    settings = db_settings.model_copy(update={
        "require_auth": True, "webhook_allow_private": True, "webhook_poll_interval_s": 0.1})  # fmt: skip
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.app.state.test_settings = settings  # type: ignore[attr-defined]
        yield client


def end(client: TestClient, job_id: str, to: JobStatus) -> None:
    """What the worker does at the end of a job (cancel goes through the route)."""
    with session_scope(client.app.state.test_settings) as session:  # type: ignore[attr-defined]
        if to is not JobStatus.CANCELLED:
            transition_job(session, job_id=job_id, to=JobStatus.RUNNING, started_at=utcnow())
        transition_job(session, job_id=job_id, to=to, finished_at=utcnow())
        session.commit()


def test_fine_tuning_webhooks_unwrap_with_the_openai_sdk(
    app_client: TestClient, receiver: Receiver
) -> None:
    tenant = f"hooks-{secrets.token_hex(4)}"  # a fresh tenant: a secret made by this code
    alice = sdk(app_client, tenant)
    auth = {"Authorization": f"Bearer {alice.api_key}"}
    secret = app_client.get("/v1/webhook_secret", headers=auth).json()["secret"]
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:], validate=True)) == 32
    file = chat_file(alice)
    hook = {"gradacc": {"webhook_url": f"{receiver.url}/hook"}}
    jobs = {}
    for status in EVENTS:
        job = alice.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=file.id,
                                            extra_body=hook)  # fmt: skip
        jobs[status] = job.id
        if status == "cancelled":
            alice.fine_tuning.jobs.cancel(job.id)
        else:
            end(app_client, job.id, JobStatus(status))
    wait_until(lambda: len(receiver.received) >= 3, what="three webhooks", timeout=30, every=0.05)
    unwrapped = {}
    for _, headers, raw in receiver.received:
        event = UNWRAPPER.webhooks.unwrap(raw, headers, secret=secret)
        assert isinstance(event, FINE_TUNING_EVENTS), event
        unwrapped[event.data.id] = event
        other = next(j for j in jobs.values() if j != event.data.id)  # says another job ended
        tampered = raw.replace(event.data.id.encode(), other.encode())
        assert tampered != raw
        with pytest.raises(openai.InvalidWebhookSignatureError):
            UNWRAPPER.webhooks.unwrap(tampered, headers, secret=secret)
        with pytest.raises(openai.InvalidWebhookSignatureError):  # another tenant's secret
            UNWRAPPER.webhooks.unwrap(raw, headers, secret=secret[:-8] + "AAAAAAA=")
    assert set(unwrapped) == set(jobs.values())
    for status, job_id in jobs.items():
        event = unwrapped[job_id]
        assert isinstance(event, EVENTS[status]), event
        assert event.type == f"fine_tuning.job.{status}" and event.object == "event"
        assert event.id.startswith("evt_") and abs(event.created_at - time.time()) < 3600


def test_a_jobs_webhook_keeps_its_body_and_carries_both_signatures(
    app_client: TestClient, receiver: Receiver
) -> None:
    alice = sdk(app_client, f"hooks-{secrets.token_hex(4)}")
    auth = {"Authorization": f"Bearer {alice.api_key}"}
    secret = app_client.get("/v1/webhook_secret", headers=auth).json()["secret"]
    body = {**TINY, "webhook_url": f"{receiver.url}/hook"}
    job = app_client.post("/v1/jobs", json=body, headers=auth).json()
    end(app_client, job["id"], JobStatus.SUCCEEDED)
    wait_until(lambda: len(receiver.received) == 1, what="a webhook", timeout=30, every=0.05)
    [(_, headers, raw)] = receiver.received
    assert verify(secret, raw, headers[SIGNATURE_HEADER], now=int(time.time()))
    UNWRAPPER.webhooks.verify_signature(raw, headers, secret=secret)  # raises if it does not match
    with pytest.raises(openai.InvalidWebhookSignatureError):
        UNWRAPPER.webhooks.verify_signature(raw + b" ", headers, secret=secret)


def test_a_secret_from_before_base64_keys_is_recognised() -> None:
    """Secrets made earlier were ``whsec_`` + URL-safe text; one that does not decode as the SDK
    decodes gets no ``webhook-signature`` (rather than one no verifier can check)."""
    assert signing_key("whsec_abc") is None  # three characters: not base64
    assert signing_key("whsec_" + base64.b64encode(b"k" * 32).decode()) == b"k" * 32
    assert signing_key("plain") == b"plain"


def test_rotating_gives_a_secret_the_sdk_accepts_and_retires_the_old_one(
    app_client: TestClient,
) -> None:
    tenant = f"hooks-{secrets.token_hex(4)}"
    with session_scope(app_client.app.state.test_settings) as session:  # type: ignore[attr-defined]
        session.add(WebhookSecret(tenant=tenant, secret="whsec_" + secrets.token_urlsafe(32)))
        session.commit()  # a secret as made before: URL-safe text
    auth = {"Authorization": f"Bearer {sdk(app_client, tenant).api_key}"}
    old = app_client.get("/v1/webhook_secret", headers=auth).json()["secret"]
    new = app_client.post("/v1/webhook_secret/rotate", headers=auth).json()["secret"]
    assert new != old and app_client.get("/v1/webhook_secret", headers=auth).json()["secret"] == new
    assert signing_key(new) == base64.b64decode(new[6:], validate=True)
