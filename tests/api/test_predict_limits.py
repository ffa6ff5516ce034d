"""Predict requests waiting at once are capped per tenant: past GRADACC_MAX_PREDICTS_PER_TENANT a
request is a 429 naming the setting and queues nothing; another tenant is not held by it, and a
request whose wait is long over (its API process died) no longer counts."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from api.main import create_app
from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.serving.predictions import create_prediction
from gradacc.settings import Settings
from gradacc.tables import Prediction, utcnow
from tests.api.test_predict_timeout import _trained_job


def _waiting(settings: Settings, job_id: str, tenant: str, count: int) -> None:
    """Requests another client is waiting for (no worker answers here). Dated a minute ahead: they
    stay inside the counting window (``serve_timeout_s``) however slowly this machine gets to
    the request that must count them."""
    with session_scope(settings) as session:
        for _ in range(count):
            create_prediction(session, job_id=job_id, tenant=tenant, step=None,
                              request={"inputs": ["x"]})  # fmt: skip
        session.flush()
        ahead = utcnow() + timedelta(minutes=1)
        session.execute(
            update(Prediction).where(Prediction.tenant == tenant).values(created_at=ahead)
        )
        session.commit()


def _queued(settings: Settings) -> int:
    with session_scope(settings) as session:
        return int(session.scalar(select(func.count()).select_from(Prediction)) or 0)


def test_a_tenant_past_its_waiting_predictions_gets_a_429(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"require_auth": True, "serve_timeout_s": 0.3,
                                              "max_predicts_per_tenant": 2})  # fmt: skip
    with session_scope(settings) as session:
        keys = {t: create_api_key(session, tenant=t) for t in ("alice", "bob")}
    jobs = {t: _trained_job(settings, tenant=t) for t in ("alice", "bob")}
    _waiting(settings, jobs["alice"], "alice", 2)
    headers = {t: {"Authorization": f"Bearer {keys[t]}"} for t in keys}
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:

        def ask(tenant: str) -> tuple[int, dict[str, str]]:
            reply = client.post(f"/v1/jobs/{jobs[tenant]}/predict", json={"inputs": ["x"]},
                                headers=headers[tenant])  # fmt: skip
            return reply.status_code, reply.json()["error"]

        status, error = ask("alice")
        assert status == 429 and error["code"] == "too_many_predictions"
        assert error["param"] == "GRADACC_MAX_PREDICTS_PER_TENANT"
        assert "GRADACC_MAX_PREDICTS_PER_TENANT" in error["message"]
        assert _queued(settings) == 2  # the refused one was not queued
        assert ask("bob")[0] == 504  # bob waits (and nobody answers here)
        with session_scope(settings) as session:  # alice's two waits ended long ago
            session.execute(update(Prediction).values(created_at=utcnow() - timedelta(hours=1)))
            session.commit()
        assert ask("alice")[0] == 504
