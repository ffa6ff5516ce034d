"""The Tinker routes in-process, with no worker: a resent call is one future (the SDK resends a
POST with the same ``seq_id`` after a timeout), a future no host holds says ``paused_capacity``
after its long-poll and its session gets one host job (of the session's priority, out of the
tenant's job list), and hostile bodies are 4xx naming their field, never a 5xx (which the SDK
would retry for minutes).

On each test's own SQLite database only: the suite's PostgreSQL database is shared by the
session's tests, and a waiting Tinker model left there draws a host onto another test's worker,
which then takes that test's worker (seen in a two-copy run: a Redis test's job stayed queued)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.main import create_app
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job
from gradacc.tinker.tables import TinkerSession

MODEL = "gradacc/tiny-chat"
KEY = {"X-API-Key": "tml-local"}  # authentication off: any tml- key is the default tenant


@pytest.fixture
def tinker(embedded_settings: Settings) -> Any:
    settings = embedded_settings.model_copy(update={"tinker_poll_wait_s": 0.3})
    with TestClient(create_app(settings), raise_server_exceptions=False, headers=KEY) as client:
        yield client


def _model(client: TestClient) -> tuple[str, str]:
    body = {"tags": [], "user_metadata": {"priority": "3"}}
    session = client.post("/api/v1/create_session", json=body).json()["session_id"]
    made = client.post("/api/v1/create_model", json={"session_id": session, "model_seq_id": 0,
                       "base_model": MODEL, "lora_config": {"rank": 2}})  # fmt: skip
    assert made.status_code == 200, made.text
    done = client.post("/api/v1/retrieve_future", json={"request_id": made.json()["request_id"]})
    return session, done.json()["model_id"]


def test_a_resent_call_is_one_future_and_an_unheld_model_waits_for_capacity(tinker: Any) -> None:
    session, model = _model(tinker)
    assert model == f"{session}:train:0"
    step = {"model_id": model, "seq_id": 1, "adam_params": {"learning_rate": 1e-3}}
    first = tinker.post("/api/v1/optim_step", json=step).json()["request_id"]
    assert tinker.post("/api/v1/optim_step", json=step).json()["request_id"] == first
    waited = tinker.post("/api/v1/retrieve_future", json={"request_id": first}).json()
    assert waited == {"type": "try_again", "request_id": first, "queue_state": "paused_capacity"}
    tinker.post("/api/v1/retrieve_future", json={"request_id": first})
    with session_scope(tinker.app.state.settings) as db:  # one host job, queued, of its priority
        jobs = db.scalars(select(Job)).all()
        owner = db.get(TinkerSession, session)
        assert owner is not None and [job.id for job in jobs] == [owner.job_id]
        assert (jobs[0].kind, jobs[0].status, jobs[0].priority) == ("tinker", "queued", 3)
    assert tinker.get("/v1/jobs").json()["data"] == []  # not in the tenant's job list
    again = tinker.post("/api/v1/optim_step", json={**step, "seq_id": 2}).json()["request_id"]
    assert again != first
    info = tinker.post("/api/v1/get_info", json={"model_id": model}).json()
    assert info["model_data"]["model_name"] == MODEL and info["lora_rank"] == 2


HOSTILE: list[tuple[str, Any, str]] = [
    ("create_model", {"session_id": "S", "model_seq_id": 1, "base_model": MODEL, "lora_config": "x"}, "lora_config"),
    ("create_model", {"session_id": "S", "model_seq_id": 1, "base_model": MODEL, "optimizer_config": 3}, "optimizer_config"),
    ("create_model", {"session_id": "S", "model_seq_id": 1, "base_model": MODEL, "user_metadata": []}, "user_metadata"),
    ("create_model", {"session_id": "S", "model_seq_id": "0", "base_model": MODEL}, "model_seq_id"),
    ("create_model", {"session_id": "S", "model_seq_id": 1, "base_model": "no-org"}, "base_model"),
    ("create_model", {"session_id": "S", "model_seq_id": 1, "base_model": MODEL, "lora_config": {"rank": 2, "seed": "s"}}, "lora_config.seed"),
    ("sessions/S/finish", {"reason": "done"}, "reason"),
    ("create_session", {"tags": [], "user_metadata": {"priority": "99"}}, "user_metadata.priority"),
    ("create_session", {"tags": [], "user_metadata": {"priority": "high"}}, "user_metadata.priority"),
    ("create_session", {"tags": [], "user_metadata": {"ranks": "0"}}, "user_metadata.ranks"),
    ("create_session", {"tags": [], "user_metadata": {"ranks": "2"}}, "user_metadata.ranks"),  # no worker has 2 devices
    ("optim_step", {"model_id": "M", "seq_id": 0}, "seq_id"),
    ("save_weights", {"model_id": "M", "seq_id": 5, "path": "a/b"}, "path"),
    ("save_weights_external", {"model_id": "M", "seq_id": 5, "path": "x", "age_encryption_recipients": ["age1"]}, "age_encryption_recipients"),
    ("asample", {"sampling_session_id": "M", "seq_id": 1, "num_samples": 1, "topk_prompt_logprobs": 3}, "sampling_session_id"),
    ("load_weights", {"session_id": "S", "model_seq_id": 1, "path": "tinker://nope"}, "path"),
    ("create_sampling_session", {"session_id": "S", "sampling_session_seq_id": 0, "base_model": "gradacc/nope"}, "base_model"),
]  # fmt: skip


def test_hostile_bodies_are_4xx_naming_their_field(tinker: Any) -> None:
    session, model = _model(tinker)
    for route, body, field in HOSTILE:
        body = {
            k: {"S": session, "M": model}.get(v, v) if isinstance(v, str) else v
            for k, v in body.items()
        }
        answer = tinker.post(f"/api/v1/{route.replace('S', session)}", json=body)
        assert 400 <= answer.status_code < 500, (route, answer.text)
        assert answer.json()["error"]["param"] == field, (route, answer.text)
    for raw in (b"", b"\x00\xff garbage", b"[1, 2]"):
        answer = tinker.post("/api/v1/forward_backward", content=raw,
                             headers={"Content-Type": "application/x-protobuf"})  # fmt: skip
        assert answer.status_code in (404, 422) and answer.json()["error"]["param"] in (
            "body",
            "model_id",
        )
    zstd = tinker.post("/api/v1/forward_backward", content=b"not zstd",
                       headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd"})  # fmt: skip
    assert zstd.status_code == 422 and zstd.json()["error"]["param"] == "body"
    for route in ("get_info", "retrieve_future", "weights_info", "session_heartbeat", "asample"):
        for body in ([], "text", 7, None, {"model_id": ["x"]}):
            answer = tinker.post(f"/api/v1/{route}", json=body)
            assert 400 <= answer.status_code < 500, (route, body, answer.text)
