"""The Tinker host: ``python -m worker.tinker.host WORKER``, a process its worker's consumer starts
(``worker.tinker.runner``). It claims Tinker models that have requests waiting and no live host
(a lease, ``gradacc.leases``), loads each at its first request, and answers every held model's
requests one at a time in arrival order, so the chunks and calls of a window add up whatever order
they came in. A sampler idle for ``SAMPLER_IDLE_S`` is let go (it loads again when asked); a
training model idle for ``tinker_idle_s`` or whose session finished is closed.

A training model is the process's memory: if its host dies, another host cannot continue it. A
model that had trained and is found without its host is marked ``lost`` and its waiting requests
fail, naming ``load_state`` from the last ``save_state`` (docs/tinker.md)."""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.orm import Session

from gradacc import leases
from gradacc.db import get_sessionmaker
from gradacc.settings import Settings, get_settings
from gradacc.tables import utcnow
from gradacc.tinker import queue
from gradacc.tinker.tables import TinkerModel, TinkerRequest
from trainer_core.tinker_host.host import TrainingHost
from worker.tinker import calls

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
    host: TrainingHost | None = None
    swapped: Path | None = None  # a training model swapped out to disk (``_make_room``)
    used: float = field(default_factory=time.monotonic)


class TinkerHost:
    def __init__(self, settings: Settings, worker: str) -> None:
        self.settings, self.worker = settings, worker
        self.sessions = get_sessionmaker(settings)
        self.held: dict[str, Held] = {}
        self.dropped: set[str] = set()  # models to let go, found by the renewing thread
        self.served: dict[str, float] = {}  # tenant -> when this host last answered it
        # This worker's earlier host is gone (one per worker): what it swapped out goes too.
        self.swap_dir = settings.tinker_dir / "swap" / worker.replace("/", "_")
        shutil.rmtree(self.swap_dir, ignore_errors=True)

    def run(self) -> None:
        threading.Thread(target=self.renew_forever, name="tinker-leases", daemon=True).start()
        empty_since = time.monotonic()
        pause = POLL_FIRST_S
        while True:
            worked = self.once()
            if self.held or worked:
                empty_since = time.monotonic()
            elif time.monotonic() - empty_since > self.settings.tinker_host_linger_s:
                return
            if worked:
                pause = POLL_FIRST_S
            else:
                time.sleep(pause)
                pause = min(pause * 2, POLL_S)

    def renew_forever(self) -> None:
        """The held models' leases, renewed while a long request runs too."""
        while True:
            time.sleep(self.settings.batch_lease_s / 3)
            try:
                with self.sessions() as session:
                    self._renew(session)
            except Exception:  # a database outage: tried again at the next beat
                log.exception("tinker: renewing the leases failed; trying again")

    def once(self) -> bool:
        with self.sessions() as session:
            self._claim(session)
            self._drop_released(session)
            request = queue.next_pending(session, list(self.held), self.served)
            if request is None:
                self._let_go(session)
                return False
            self._answer(session, request)
            return True

    def _claim(self, session: Session) -> None:
        now = utcnow()
        free = queue.unheld(now)
        query = queue.waiting_unheld(now).where(TinkerModel.id.not_in(list(self.held)))
        for model_id in session.scalars(query.limit(16)).all():
            take = update(TinkerModel).where(TinkerModel.id == model_id, free)
            until = now + timedelta(seconds=self.settings.batch_lease_s)
            if session.execute(take.values(holder=self.worker, held_until=until)).rowcount != 1:  # type: ignore[attr-defined]
                session.rollback()
                continue
            session.commit()
            row = session.get(TinkerModel, model_id)
            if row is not None and row.kind == "train" and row.progressed:
                self._lose(session, row)
                continue
            log.info("tinker: holding %s", model_id)
            self.held[model_id] = Held(sampler=row is not None and row.kind == "sample")

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
        if held is not None and held.swapped is not None:
            held.swapped.unlink(missing_ok=True)

    def _answer(self, session: Session, request: TinkerRequest) -> None:
        held = self.held[request.model_id]
        held.used = time.monotonic()
        row = session.get(TinkerModel, request.model_id)
        assert row is not None
        arrival, kind, body = request.arrival, request.kind, request.body
        self.served[request.tenant] = time.monotonic()
        try:
            if held.host is None:
                self._make_room(sampler=held.sampler)
                held.host = calls.load(session, self.settings, row)
                if held.swapped is not None:
                    held.host.swap_in(held.swapped)
                    held.swapped = None
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


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    (worker,) = argv
    settings = get_settings()
    if settings.train_threads > 0:  # the worker's share of the cores, as a job's training gets
        import torch

        torch.set_num_threads(settings.train_threads)
    TinkerHost(settings, worker).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
