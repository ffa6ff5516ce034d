"""The Tinker host's bookkeeping, in-process on a migrated SQLite database, no worker: it claims
a model with a request waiting and answers it; a model it holds closes after ``tinker_idle_s``
without a request; a trained model found without its host (its lease lapsed: the worker died) is
``lost``, and its waiting request fails naming ``load_state`` instead of training from the base;
between tenants, the one answered least recently goes first."""

from __future__ import annotations

import json
import time
from datetime import timedelta

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import utcnow
from gradacc.tinker import queue
from gradacc.tinker.tables import TinkerModel, TinkerSession
from worker.tinker.host import TinkerHost

STEP = json.dumps({"adam_params": {"learning_rate": 1e-3}}).encode()


def _model(settings: Settings, model_id: str, tenant: str = "t", **fields: object) -> None:
    with session_scope(settings) as session:
        if session.get(TinkerSession, f"ts-{tenant}") is None:
            session.add(TinkerSession(id=f"ts-{tenant}", tenant=tenant))
        session.add(TinkerModel(id=model_id, session_id=f"ts-{tenant}", tenant=tenant,
                                kind="train", base_model="gradacc/tiny-chat", rank=2, **fields))  # fmt: skip
        session.commit()


def _ask(settings: Settings, model_id: str, seq_id: int, tenant: str = "t") -> str:
    with session_scope(settings) as session:
        return queue.enqueue(session, tenant=tenant, model_id=model_id, seq_id=seq_id,
                             kind="optim_step", body=STEP)  # fmt: skip


def _answer(settings: Settings, request_id: str, tenant: str = "t") -> queue.Answer:
    with session_scope(settings) as session:
        found = queue.answer(session, tenant=tenant, request_id=request_id)
        assert found is not None
        return found


def test_a_held_model_answers_then_closes_when_idle(embedded_settings: Settings) -> None:
    settings = embedded_settings.model_copy(update={"tinker_idle_s": 0.5})
    _model(settings, "ts-1:train:0")
    asked = _ask(settings, "ts-1:train:0", 1)
    host = TinkerHost(settings, "w1")
    assert host.once()  # claimed and answered
    answer = _answer(settings, asked)
    assert answer.status == "done" and "metrics" in json.loads(answer.result or b"{}")
    time.sleep(0.6)
    assert not host.once()
    with session_scope(settings) as session:
        row = session.get(TinkerModel, "ts-1:train:0")
        assert row is not None and (row.status, row.holder) == ("closed", None)
    assert not host.held


def test_a_trained_model_without_its_host_is_lost_not_remade(embedded_settings: Settings) -> None:
    lapsed = utcnow() - timedelta(seconds=5)  # its host's worker died
    _model(embedded_settings, "ts-1:train:1", progressed=True, holder="w0", held_until=lapsed)
    asked = _ask(embedded_settings, "ts-1:train:1", 3)
    host = TinkerHost(embedded_settings, "w2")
    host.once()
    answer = _answer(embedded_settings, asked)
    assert answer.status == "failed" and "load_state" in json.loads(answer.result or b"{}")["error"]
    with session_scope(embedded_settings) as session:
        row = session.get(TinkerModel, "ts-1:train:1")
        assert row is not None and row.status == "lost"
    assert not host.held


def test_one_tenants_flood_does_not_starve_another(embedded_settings: Settings) -> None:
    _model(embedded_settings, "ts-a:train:0", tenant="a")
    _model(embedded_settings, "ts-b:train:0", tenant="b")
    flood = [_ask(embedded_settings, "ts-a:train:0", n, tenant="a") for n in range(1, 5)]
    late = _ask(embedded_settings, "ts-b:train:0", 1, tenant="b")
    host = TinkerHost(embedded_settings, "w3")
    assert host.once() and host.once()  # a's first call, then b's, though a's came first
    assert _answer(embedded_settings, late, tenant="b").status == "done"
    states = [_answer(embedded_settings, r, tenant="a").status for r in flood]
    assert states == ["done", "pending", "pending", "pending"]
    while host.once():
        pass
    assert [_answer(embedded_settings, r, tenant="a").status for r in flood] == ["done"] * 4
