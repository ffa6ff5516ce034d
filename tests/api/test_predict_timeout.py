"""No predict server answers: the wait ends in a 504 after GRADACC_PREDICT_TIMEOUT_S, and the
request is withdrawn, so a server that comes later does not take it (both databases)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.db import session_scope
from gradacc.models import JobStatus
from gradacc.predictions import take_prediction
from gradacc.settings import Settings
from tests.support import make_job


def test_no_answer_is_a_504_and_the_request_is_withdrawn(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"predict_timeout_s": 0.3})
    spec = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}
    job_id = make_job(settings, status=JobStatus.SUCCEEDED, spec=spec)
    model = settings.jobs_dir / job_id / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        reply = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": ["x"]})
    assert reply.status_code == 504
    assert reply.json()["error"]["code"] == "prediction_timeout"
    with session_scope(settings) as session:
        assert take_prediction(session, worker="late") is None
