"""A Tinker session's host job and its host's bookkeeping, in-process on a migrated SQLite
database, no worker: the session gets one host job at a time, which the scheduler's claim orders
with the training jobs (priority, then fair share); the host claims its session's model with a
request waiting and answers it; parked, the model goes on in the next host job where it stopped;
the job ends only when nothing of its session waits; a trained model found without its host and
unparked (the process was killed) is ``lost``, and its waiting request fails naming
``load_state`` instead of training from the base; a parked model idle past ``tinker_idle_s`` is
closed; the micro-batches the host cuts a chunk into leave a window's update alone."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
from sqlalchemy import update

from gradacc.db import session_scope
from gradacc.jobs.states import new_job
from gradacc.scheduling.claim import claim_next
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, utcnow
from gradacc.tinker import placement, queue
from gradacc.tinker.tables import TinkerModel, TinkerSession
from gradacc.tinker.wire import pb
from tests.trainer_core.test_tinker_host import _data
from trainer_core.tinker_host.host import Datum
from worker.tinker.host import TinkerHost

STEP = json.dumps({"adam_params": {"learning_rate": 1e-3}}).encode()


def _session(settings: Settings, tenant: str = "t", priority: int = 0) -> str:
    with session_scope(settings) as session:
        sid = f"ts-{tenant}-{priority}"
        session.add(TinkerSession(id=sid, tenant=tenant, priority=priority))
        session.commit()
    return sid


def _model(settings: Settings, sid: str, number: int = 0, **fields: object) -> str:
    model_id = f"{sid}:train:{number}"
    with session_scope(settings) as session:
        tenant = sid.split("-")[1]
        session.add(TinkerModel(id=model_id, session_id=sid, tenant=tenant, kind="train",
                                base_model="gradacc/tiny-chat", rank=2, **fields))  # fmt: skip
        session.commit()
    return model_id


def _ask(settings: Settings, model_id: str, seq_id: int) -> str:
    with session_scope(settings) as session:
        return queue.enqueue(session, tenant=model_id.split("-")[1], model_id=model_id,
                             seq_id=seq_id, kind="optim_step", body=STEP)  # fmt: skip


def _status(settings: Settings, request_id: str) -> tuple[str, dict[str, object]]:
    with session_scope(settings) as session:
        tenant = "t"
        found = queue.answer(session, tenant=tenant, request_id=request_id)
        assert found is not None
        return found.status, json.loads(found.result or b"{}")


def _host_job(settings: Settings, sid: str, worker: str) -> str:
    """The session's host job, claimed by ``worker`` as the scheduler would."""
    with session_scope(settings) as session:
        job_id = placement.ensure_host(session, sid)
        assert job_id is not None
        stmt = update(Job).where(Job.id == job_id)
        session.execute(stmt.values(status=JobStatus.RUNNING, worker=worker))
        session.commit()
    return job_id


def _job_status(settings: Settings, job_id: str) -> str:
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.status


def test_a_parked_model_goes_on_in_the_next_host_job(embedded_settings: Settings) -> None:
    settings = embedded_settings
    sid = _session(settings)
    model_id = _model(settings, sid)
    first = _ask(settings, model_id, 1)
    job = _host_job(settings, sid, "w1")
    host = TinkerHost(settings, "w1", sid)
    assert host.once()  # claimed and answered
    status, result = _status(settings, first)
    assert status == "done" and "metrics" in result
    second = _ask(settings, model_id, 2)
    with session_scope(settings) as session:  # a request waits: the job goes on
        assert not placement.end_hosting(session, job_id=job, session_id=sid, worker="w1")
    host.once()
    host.park_all()
    with session_scope(settings) as session:
        row = session.get(TinkerModel, model_id)
        assert row is not None and row.holder is None and row.parked is not None
        parked = Path(row.parked)
        assert parked.is_file()
        assert placement.end_hosting(session, job_id=job, session_id=sid, worker="w1")
    assert _job_status(settings, job) == "succeeded" and _status(settings, second)[0] == "done"

    third = _ask(settings, model_id, 3)
    later = _host_job(settings, sid, "w2")
    assert later != job
    again = TinkerHost(settings, "w2", sid)
    assert again.once()
    assert _status(settings, third)[0] == "done"
    held = again.held[model_id].host
    assert held is not None and held.steps == 3  # two steps before parking, one after
    with session_scope(settings) as session:
        row = session.get(TinkerModel, model_id)
        assert row is not None and row.parked is None and not parked.exists()


def test_a_trained_model_without_its_host_is_lost_not_remade(embedded_settings: Settings) -> None:
    lapsed = utcnow() - timedelta(seconds=5)  # its host was killed, nothing parked
    sid = _session(embedded_settings)
    model_id = _model(embedded_settings, sid, progressed=True, holder="w0", held_until=lapsed)
    asked = _ask(embedded_settings, model_id, 3)
    host = TinkerHost(embedded_settings, "w2", sid)
    host.once()
    status, result = _status(embedded_settings, asked)
    assert status == "failed" and "load_state" in str(result["error"])
    with session_scope(embedded_settings) as session:
        row = session.get(TinkerModel, model_id)
        assert row is not None and row.status == "lost"
    assert not host.held


def test_a_session_has_one_host_job_at_a_time(embedded_settings: Settings) -> None:
    sid = _session(embedded_settings)
    with session_scope(embedded_settings) as session:
        made = placement.ensure_host(session, sid)
        assert made is not None and placement.ensure_host(session, sid) is None
        job = session.get(Job, made)
        assert job is not None and (job.kind, job.status, job.tenant) == ("tinker", "queued", "t")
        session.execute(update(Job).where(Job.id == made).values(status=JobStatus.SUCCEEDED))
        session.commit()
        after = placement.ensure_host(session, sid)
        assert after not in (None, made)
        session.execute(update(Job).where(Job.id == after).values(status=JobStatus.FAILED))
        owner = session.get(TinkerSession, sid)
        assert owner is not None
        owner.finished_at = utcnow()
        session.commit()
        assert placement.ensure_host(session, sid) is None  # a finished session: none


def _training_job(settings: Settings, tenant: str, status: str = JobStatus.QUEUED) -> str:
    with session_scope(settings) as session:
        job = new_job(tenant=tenant, spec={"model": "builtin:tiny-bert"}, effective_batch_size=8)
        job.status = status
        session.add(job)
        session.commit()
        return job.id


def _host_job_queued(settings: Settings, tenant: str, priority: int) -> str:
    with session_scope(settings) as session:
        made = placement.ensure_host(session, _session(settings, tenant, priority))
        assert made is not None
        return made


def test_the_scheduler_orders_host_jobs_with_training_jobs(embedded_settings: Settings) -> None:
    settings = embedded_settings.model_copy(update={"max_running_per_tenant": 4})
    older = _training_job(settings, "a")
    urgent = _host_job_queued(settings, "b", priority=3)
    with session_scope(settings) as session:  # priority first, though the job is older
        claimed = claim_next(session, worker="w1", settings=settings)
        assert claimed is not None and claimed.job_id == urgent
        claimed = claim_next(session, worker="w1", settings=settings)
        assert claimed is not None and claimed.job_id == older
    # Fair share: tenant a has a device in use (its job runs), c has none.
    a_host = _host_job_queued(settings, "a", priority=0)
    c_host = _host_job_queued(settings, "c", priority=0)
    with session_scope(settings) as session:
        claimed = claim_next(session, worker="w2", settings=settings)
        assert claimed is not None and claimed.job_id == c_host
        claimed = claim_next(session, worker="w3", settings=settings)
        assert claimed is not None and claimed.job_id == a_host


def test_a_parked_model_idle_too_long_is_closed(
    embedded_settings: Settings, tmp_path: Path
) -> None:
    sid = _session(embedded_settings)
    parked = tmp_path / "parked.pt"
    parked.write_bytes(b"state")
    long_ago = utcnow() - timedelta(hours=1)
    idle = _model(embedded_settings, sid, 0, progressed=True, parked=str(parked), seen_at=long_ago)
    recent = _model(embedded_settings, sid, 1, progressed=True, parked=str(tmp_path / "other"))
    with session_scope(embedded_settings) as session:
        assert placement.close_idle(session, idle_s=60) == [str(parked)]
        states = [session.get(TinkerModel, m).status for m in (idle, recent)]  # type: ignore[union-attr]
        assert states == ["closed", "active"]


def _window_body(model_id: str, data: list[Datum], seq_id: int) -> bytes:
    """A ``ForwardBackwardRequest`` as the SDK encodes it (tokens and dense little-endian
    arrays), with ``num_loss_tokens``."""
    message = pb.ForwardBackwardRequest(model_id=model_id, seq_id=seq_id, loss_fn="cross_entropy")
    message.loss_fn_config_v2["grad_accumulation_normalization"].text = "num_loss_tokens"
    for datum in data:
        wired = message.data.add()
        wired.model_input.add().encoded_text.tokens = np.array(datum.tokens, "<i4").tobytes()
        for key, value in datum.inputs.items():
            tensor = wired.loss_fn_inputs[key]
            if value.dtype.is_floating_point:
                tensor.dtype, tensor.dense = pb.DTYPE_FLOAT32, value.numpy().astype("<f4").tobytes()
            else:
                tensor.dtype, tensor.dense = pb.DTYPE_INT64, value.numpy().astype("<i8").tobytes()
            tensor.shape.append(len(value))
    return message.SerializeToString()


def test_the_workers_micro_batches_leave_the_update_alone(embedded_settings: Settings) -> None:
    """One window (two calls of protobuf bodies, as the SDK sends them) answered by hosts that
    cut each chunk into micro-batches of 1, of 4, and not at all: the same SGD update (1e-6)."""
    data = _data(7, seed=12)
    updates = []
    for micro_batch in (0, 1, 4):
        settings = embedded_settings.model_copy(update={"tinker_micro_batch": micro_batch})
        sid = _session(settings, "t", priority=micro_batch)
        model_id = _model(settings, sid, optimizer="sgd")
        with session_scope(settings) as session:
            for seq_id, part in ((1, data[:5]), (2, data[5:])):
                queue.enqueue(session, tenant="t", model_id=model_id, seq_id=seq_id,
                              kind="forward_backward", body=_window_body(model_id, part, seq_id))  # fmt: skip
            step = {"optimizer_params": {"type": "sgd", "learning_rate": 0.5}}
            queue.enqueue(session, tenant="t", model_id=model_id, seq_id=3, kind="optim_step",
                          body=json.dumps(step).encode())  # fmt: skip
        host = TinkerHost(settings, "w", sid)
        base = None
        while host.once():
            held = host.held[model_id].host
            assert held is not None and held.micro_batch == micro_batch
            base = base or held.weights()
        assert held is not None and base is not None
        updates.append({k: v - base[k] for k, v in held.weights().items()})
    for other in updates[1:]:
        worst = max(float((other[k] - updates[0][k]).abs().max()) for k in other)
        assert worst <= 1e-6, worst
    assert max(float(v.abs().max()) for v in updates[0].values()) > 1e-4
