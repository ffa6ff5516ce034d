"""No predict server answers: the wait ends in a 504 after GRADACC_SERVE_TIMEOUT_S, and the
request is withdrawn, so a server that comes later does not take it; another tenant's job is a
404 and queues nothing (both databases)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.serving.predictions import take_prediction
from gradacc.settings import Settings
from gradacc.tables import JobStatus
from tests.support import make_job


def _trained_job(settings: Settings, tenant: str = "default") -> str:
    spec = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}
    job_id = make_job(settings, status=JobStatus.SUCCEEDED, spec=spec, tenant=tenant)
    model = settings.jobs_dir / job_id / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    return job_id


def test_another_tenants_job_is_a_404(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"require_auth": True, "serve_timeout_s": 0.3})
    with session_scope(settings) as session:
        keys = {t: create_api_key(session, tenant=t) for t in ("alice", "bob")}
    job_id = _trained_job(settings, tenant="alice")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        bob = {"Authorization": f"Bearer {keys['bob']}"}
        reply = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": ["x"]}, headers=bob)
    assert reply.status_code == 404 and reply.json()["error"]["param"] == "job_id"
    with session_scope(settings) as session:
        assert take_prediction(session, worker="w") is None  # nothing was queued


def test_no_answer_is_a_504_and_the_request_is_withdrawn(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"serve_timeout_s": 0.3})
    job_id = _trained_job(settings)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        reply = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": ["x"]})
    assert reply.status_code == 504
    assert reply.json()["error"]["code"] == "prediction_timeout"
    with session_scope(settings) as session:
        assert take_prediction(session, worker="late") is None
