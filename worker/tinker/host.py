"""The Tinker host: the process of a Tinker session's host job (``gradacc.tinker.placement``),
started by its worker's executor as any job's process is (``worker.child.entry`` hands it here).
It claims the session's models that have requests waiting (a lease, ``gradacc.leases``), loads
each at its first request, and answers their requests one at a time in arrival order, so the
chunks and calls of a window add up whatever order they came in. A sampler idle for
``SAMPLER_IDLE_S`` is let go (it loads again when asked).

Once no request has come for ``tinker_host_linger_s`` (or the session finished), it parks its
training models (each swapped to disk whole, its open window included: ``TinkerModel.parked``)
and its job succeeds; the session's next request queues a new host job, on whichever worker the
scheduler gives it, which swaps them back in. A preemption (SIGUSR1: a job of higher priority,
or the worker stopping) parks them too, and the job is queued again.

A model that had trained and is found without its host and unparked (the process was killed) is
marked ``lost`` and its waiting requests fail, naming ``load_state`` from the last
``save_state`` (docs/tinker.md): it is never re-made from the base."""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.orm import Session

from gradacc import leases
from gradacc.db import get_sessionmaker
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, utcnow
from gradacc.tinker import placement, queue
from gradacc.tinker.tables import TinkerModel, TinkerRequest, TinkerSession
from trainer_core.spec.outputs import PREEMPT_FILE
from trainer_core.testing.failpoints import tinker_host_stays
from trainer_core.tinker_host.host import TrainingHost
from worker import exit_codes
from worker.tinker import calls, ranks

log = logging.getLogger(__name__)
# Polls for work every 2 ms right after a request, doubling to 50 ms while none comes: a client's
# next call usually follows its last answer at once (bench/tinker_overhead.py).
POLL_FIRST_S, POLL_S = 0.002, 0.05
SAMPLER_IDLE_S = 120.0
LOADED_SAMPLERS = 4  # samplers kept in memory at once
LOST = "its worker died; continue with load_state (create_training_client_from_state) from its last save_state"


@dataclass
class Held:
    sampler: bool
    host: TrainingHost | ranks.Replicated | None = None
    swapped: Path | None = None  # a training model swapped out to disk (``_make_room``)
    parked: Path | None = None  # its file from an earlier host job, swapped in at first use
    used: float = field(default_factory=time.monotonic)


class TinkerHost:
    def __init__(self, settings: Settings, worker: str, session_id: str, world: int = 1) -> None:
        self.settings, self.worker, self.session_id = settings, worker, session_id
        self.world = world  # ranks holding a replica of each training model (``ranks``)
        self.sessions = get_sessionmaker(settings)
        self.held: dict[str, Held] = {}
        self.dropped: set[str] = set()  # models to let go, found by the renewing thread
        self.ending = threading.Event()  # the session finished, or the job is no longer ours
        # Its own (removed as it ends): a host being taken over may still be using another's.
        self.swap_dir = settings.tinker_dir / "swap" / secrets.token_hex(8)

    def serve(self, job_id: str) -> int:
        """Answer until parked; the exit status for the job's supervisor."""
        preempted = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: preempted.set())
        beat = threading.Thread(target=self.renew_forever, args=(job_id,), daemon=True)
        beat.start()
        quiet_since, pause = time.monotonic(), POLL_FIRST_S
        # Over several ranks, the launcher turns SIGUSR1 into this file (worker.child.ranks).
        asked = self.settings.jobs_dir / job_id / PREEMPT_FILE
        try:
            while True:
                if preempted.is_set() or (self.world > 1 and asked.exists()):
                    self.park_all()
                    return exit_codes.PREEMPTED
                worked = self.once()
                if worked:
                    quiet_since, pause = time.monotonic(), POLL_FIRST_S
                    continue
                linger = time.monotonic() - quiet_since > self.settings.tinker_host_linger_s
                linger = linger and not tinker_host_stays(self.session_id)  # a test's hold
                if linger or self.ending.is_set():
                    self.park_all()
                    if self._end(job_id):
                        return exit_codes.OUTCOME_RECORDED
                    quiet_since = time.monotonic()  # a request came meanwhile
                time.sleep(pause)
                pause = min(pause * 2, POLL_S)
        finally:
            shutil.rmtree(self.swap_dir, ignore_errors=True)

    def _end(self, job_id: str) -> bool:
        with self.sessions() as session:
            ended = placement.end_hosting(
                session, job_id=job_id, session_id=self.session_id, worker=self.worker
            )
            if not ended:
                ended = not self._ours(session.get(Job, job_id))
        return ended

    def _ours(self, job: Job | None) -> bool:
        """The host job runs, held by this worker (not cancelled, not taken over)."""
        return job is not None and job.status == JobStatus.RUNNING and job.worker == self.worker

    def renew_forever(self, job_id: str) -> None:
        """The held models' leases, renewed while a long request runs too; and whether the
        session finished or the job is no longer this worker's (taken over, cancelled)."""
        while True:
            time.sleep(self.settings.batch_lease_s / 3)
            try:
                with self.sessions() as session:
                    self._renew(session)
                    owner = session.get(TinkerSession, self.session_id)
                    finished = owner is None or owner.finished_at is not None
                    if finished or not self._ours(session.get(Job, job_id)):
                        self.ending.set()
            except Exception:  # a database outage: tried again at the next beat
                log.exception("tinker: renewing the leases failed; trying again")

    def once(self) -> bool:
        with self.sessions() as session:
            self._claim(session)
            self._drop_released(session)
            request = queue.next_pending(session, list(self.held))
            if request is None:
                self._let_go(session)
                return False
            self._answer(session, request)
            return True

    def park_all(self) -> None:
        """Every held model let go: a training model's state (in memory, or swapped out) parked
        on disk for the session's next host."""
        with self.sessions() as session:
            for model_id, held in list(self.held.items()):
                parked = None
                if held.host is not None and not held.sampler:
                    parked = self._parked_path(model_id)
                    held.host.swap_out(parked)
                elif held.swapped is not None:
                    parked = self._parked_path(model_id)
                    held.swapped.replace(parked)
                held.host, held.swapped = None, None
                if parked is not None:
                    stmt = update(TinkerModel).where(TinkerModel.id == model_id)
                    session.execute(stmt.values(parked=str(parked)))
                    log.info("tinker: %s parked", model_id)
                self._release(session, model_id, status=None)

    def _parked_path(self, model_id: str) -> Path:
        return self.settings.tinker_dir / "parked" / f"{model_id.replace(':', '_')}.pt"

    def _claim(self, session: Session) -> None:
        if self.ending.is_set():
            return
        now = utcnow()
        free = queue.unheld(now)
        query = queue.waiting_unheld(now).where(
            TinkerModel.session_id == self.session_id, TinkerModel.id.not_in(list(self.held))
        )
        for model_id in session.scalars(query.limit(16)).all():
            take = update(TinkerModel).where(TinkerModel.id == model_id, free)
            until = now + timedelta(seconds=self.settings.batch_lease_s)
            if session.execute(take.values(holder=self.worker, held_until=until)).rowcount != 1:  # type: ignore[attr-defined]
                session.rollback()
                continue
            session.commit()
            row = session.get(TinkerModel, model_id)
            if row is None:
                continue
            parked = Path(row.parked) if row.parked else None
            if row.kind == "train" and row.progressed and (parked is None or not parked.is_file()):
                self._lose(session, row)
                continue
            log.info("tinker: holding %s", model_id)
            self.held[model_id] = Held(sampler=row.kind == "sample", parked=parked)

    def _lose(self, session: Session, row: TinkerModel) -> None:
        row.status, row.error, row.holder, row.held_until = "lost", LOST, None, None
        error = json.dumps({"error": f"model {row.id}: {LOST}", "category": "user"}).encode()
        stmt = update(TinkerRequest).where(
            TinkerRequest.model_id == row.id, TinkerRequest.status == "pending"
        )
        session.execute(
            stmt.values(status="failed", result=error, result_type="json", done_at=utcnow())
        )
        session.commit()

    def _renew(self, session: Session) -> None:
        """Renews the leases; a model closed (its session finished) or taken is marked to drop."""
        for model_id in list(self.held):
            status = leases.renew(
                session,
                TinkerModel,
                model_id,
                worker=self.worker,
                lease_s=self.settings.batch_lease_s,
            )
            if status != "active":
                log.info("tinker: releasing %s (%s)", model_id, status or "taken")
                self.dropped.add(model_id)

    def _drop_released(self, session: Session) -> None:
        for model_id in list(self.dropped):
            self.dropped.discard(model_id)
            if model_id in self.held:
                self._release(session, model_id, status=None)

    def _make_room(self, *, sampler: bool) -> None:
        """Before a model loads: at most four samplers in memory (an RL loop makes one per step;
        one unloaded loads again if asked) and ``tinker_models_per_host`` training models (the
        least recently used is swapped to disk whole, its open window included, and swapped
        back in at its next request)."""
        keep = LOADED_SAMPLERS if sampler else self.settings.tinker_models_per_host
        loaded = [h for h in self.held.values() if h.host is not None and h.sampler == sampler]
        for held in sorted(loaded, key=lambda h: h.used)[: max(len(loaded) - keep + 1, 0)]:
            if not sampler:
                assert held.host is not None
                held.swapped = self.swap_dir / f"{secrets.token_hex(8)}.pt"
                held.host.swap_out(held.swapped)
                log.info("tinker: a training model swapped out to make room")
            held.host = None

    def _let_go(self, session: Session) -> None:
        now = time.monotonic()
        for model_id, held in list(self.held.items()):
            row = session.get(TinkerModel, model_id)
            idle = now - held.used
            if row is None or (row.kind == "sample" and idle > SAMPLER_IDLE_S):
                self._release(session, model_id, status=None)
            elif row.kind == "train" and idle > self.settings.tinker_idle_s:
                if held.parked is not None:
                    held.parked.unlink(missing_ok=True)
                self._release(session, model_id, status="closed")

    def _release(self, session: Session, model_id: str, *, status: str | None) -> None:
        values: dict[str, object] = {"holder": None, "held_until": None}
        if status is not None:
            values["status"] = status
        stmt = update(TinkerModel).where(
            TinkerModel.id == model_id, TinkerModel.holder == self.worker
        )
        session.execute(stmt.values(**values))
        session.commit()
        held = self.held.pop(model_id, None)
        if held is not None and isinstance(held.host, ranks.Replicated):
            held.host.drop()  # the other ranks' replicas
        if held is not None and held.swapped is not None:
            held.swapped.unlink(missing_ok=True)

    def _answer(self, session: Session, request: TinkerRequest) -> None:
        held = self.held[request.model_id]
        held.used = time.monotonic()
        row = session.get(TinkerModel, request.model_id)
        assert row is not None
        arrival, kind, body = request.arrival, request.kind, request.body
        try:
            if held.host is None:
                self._make_room(sampler=held.sampler)
                held.host = calls.load(session, self.settings, row)
                if self.world > 1 and not held.sampler:
                    held.host = ranks.Replicated(row.id, held.host)
                if held.swapped is not None:
                    held.host.swap_in(held.swapped)
                    held.swapped = None
                elif held.parked is not None:  # from now on its state is this process's
                    held.host.swap_in(held.parked)
                    held.parked = row.parked = None
                    session.commit()
            result, result_type = calls.run(session, self.settings, row, held.host, kind, body)
            ok = True
        except ValueError as exc:
            session.rollback()
            result, result_type, ok = _error(str(exc), "user"), "json", False
        except Exception as exc:  # the server's fault: said to the client, logged here
            session.rollback()
            log.exception("tinker: %s on %s failed", kind, request.model_id)
            result, result_type, ok = (
                _error(f"{type(exc).__name__}: {exc}", "server"),
                "json",
                False,
            )
        if ok and kind in ("forward_backward", "optim_step", "load_weights"):
            session.execute(
                update(TinkerModel).where(TinkerModel.id == row.id).values(progressed=True)
            )
        queue.finish(session, arrival, ok=ok, result=result, result_type=result_type)


def _error(message: str, category: str) -> bytes:
    return json.dumps({"error": message, "category": category}).encode()


def serve_job(settings: Settings, job_id: str) -> int:
    """The process of host job ``job_id`` (or one of its ranks): its exit status
    (``worker.exit_codes``)."""
    world = ranks.join()
    if not world.is_main:
        ranks.follow()
        return exit_codes.OUTCOME_RECORDED
    with get_sessionmaker(settings)() as session:
        job = session.get(Job, job_id)
        session_id = placement.session_of(session, job_id)
        if job is None or session_id is None or job.worker is None:
            return exit_codes.OUTCOME_RECORDED  # gone meanwhile: nothing to host
        worker = job.worker
    if settings.train_threads > 0:  # the worker's share of the cores, as a job's training gets
        import torch

        torch.set_num_threads(settings.train_threads)
    log.info("tinker: hosting session %s (job %s, %d ranks)", session_id, job_id, world.size)
    try:
        return TinkerHost(settings, worker, session_id, world.size).serve(job_id)
    finally:
        if world.distributed:
            ranks.end()
