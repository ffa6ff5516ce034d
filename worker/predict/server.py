"""The predict server's loop: take the oldest pending request, load (or reuse) its model, answer.
On the worker's GPU when the worker holds no job, else on the CPU, so a prediction never takes
memory from a training job. torch and transformers are imported in a thread beside the loop, so
the server polls at once and the first request does not pay for the whole import. Beside the
loop, threads answer OpenAI's chat completions over HTTP (``worker.predict.openai.server``) with
the same models (``worker.predict.engine``)."""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradacc.db import DATABASE_ERRORS, session_scope
from gradacc.serving.predictions import answer_prediction, take_prediction
from gradacc.serving.resolve import record_server
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.tables import Job, Worker
from worker.predict.engine import Engine
from worker.predict.render import RenderRefused

if TYPE_CHECKING:
    import torch

    from worker.predict.cache import Loaded

log = logging.getLogger(__name__)
RECORD_EVERY_S = 5.0


@dataclass(frozen=True)
class Task:
    id: str
    request: dict[str, Any]
    folder: Path
    causal: bool
    max_length: int


def _take(settings: Settings, worker: str) -> tuple[Task | None, str | None]:
    """The next request, and the error to answer it with at once when its model is gone."""
    with session_scope(settings) as session:
        taken = take_prediction(session, worker=worker)
        if taken is None:
            return None, None
        job = session.get(Job, taken.job_id)
        try:
            if job is None:
                raise fine_tuned.ModelUnavailable(f"job {taken.job_id} no longer exists")
            folder = fine_tuned.model_folder(settings, job, taken.step)
        except fine_tuned.ModelUnavailable as exc:
            answer_prediction(session, prediction_id=taken.id, error=exc.message)
            session.commit()
            return None, exc.message
        spec = job.spec
        task = Task(
            taken.id,
            dict(taken.request),
            folder,
            spec.get("task") == "causal-lm",
            int(spec.get("max_seq_length", 128)),
        )
        session.commit()
        return task, None


def _device(settings: Settings, worker: str) -> torch.device:
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    with session_scope(settings) as session:
        row = session.get(Worker, worker)
        busy = row is not None and row.current_job is not None
    return torch.device("cpu" if busy else "cuda")


def answer(engine: Engine, task: Task) -> dict[str, Any]:
    """A causal LM's request is a chat or text completion (the OpenAI endpoint's path, its rows
    decoded with whatever else runs on that model); a classifier runs between its steps."""
    from worker.predict.batcher import activate
    from worker.predict.classify import classify
    from worker.predict.openai.run import predict_generation

    device = engine.device()  # a database read: not on the batcher's thread

    def load() -> Loaded:  # pinned until answered (worker.predict.openai.run.run_request)
        loaded = engine.cache.get(task.folder, causal=task.causal, device=device)
        loaded.pin()
        return loaded

    loaded = engine.on_models(load)
    try:
        if task.causal:  # a chat or text completion, on the path /v1/chat/completions takes
            deadline = time.monotonic() + engine.settings.serve_timeout_s
            return predict_generation(engine, loaded, task.request, deadline=deadline)

        def run() -> dict[str, Any]:
            activate(loaded)
            return classify(loaded, task.request["inputs"], task.max_length)

        return engine.on_models(run)
    finally:
        loaded.unpin()


class _Address:
    """This server's OpenAI endpoint, once it listens: recorded in its worker's row, and again
    every RECORD_EVERY_S (a worker that registers again writes a fresh row)."""

    def __init__(self, settings: Settings, worker: str) -> None:
        self.settings, self.worker = settings, worker
        self.url: str | None = None
        self.token: str | None = None
        self.next_at = 0.0

    def keep(self) -> None:
        if self.url is None or time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + RECORD_EVERY_S
        with session_scope(self.settings) as session:
            record_server(session, worker=self.worker, url=self.url, token=self.token)


def _import_and_listen(engine: Engine, address: _Address) -> None:
    """torch and transformers, once; then the OpenAI endpoint listens. One thread does both: a
    second thread importing from transformers while the first is still importing it finds the
    package half made (ImportError)."""
    import worker.predict.classify  # noqa: F401
    from worker.predict.openai.server import start_openai_server

    settings = address.settings
    # Without a configured token each server makes its own; the API reads it from the row.
    token = settings.serve_token or secrets.token_urlsafe(32)
    _, url = start_openai_server(settings, engine, token)
    log.info("predict server of %s answers OpenAI requests at %s", address.worker, url)
    address.token = None if settings.serve_token else token
    address.url = url


def serve(settings: Settings, worker: str, stop: threading.Event) -> None:
    parent = os.getppid()
    if parent == 1:  # the worker died while this process started: nobody to serve
        return
    engine = Engine(settings, lambda: _device(settings, worker))
    address = _Address(settings, worker)
    # torch and transformers are imported beside the loop, not before it: the loop answers
    # "model gone" at once, and the first real request waits only for what is left of the import.
    threading.Thread(
        target=_import_and_listen, args=(engine, address), name="predict-imports", daemon=True
    ).start()
    log.info("predict server of %s ready (up to %d models)", worker, settings.predict_cache_models)
    while not stop.is_set() and os.getppid() == parent:  # the worker went: so does this
        try:
            address.keep()
            task, _ = _take(settings, worker)
        except DATABASE_ERRORS:
            stop.wait(1.0)
            continue
        if task is None:
            stop.wait(settings.predict_poll_interval_s)
            continue
        _respond(settings, task, lambda t: answer(engine, t))


def _respond(settings: Settings, task: Task, answerer: Callable[[Task], dict[str, Any]]) -> None:
    """Answer ``task`` with what ``answerer`` gives, or with what went wrong."""
    response, error = None, None
    try:
        response = answerer(task)
    except RenderRefused as exc:  # the tenant's template: its request's answer, one line
        log.warning("prediction %s refused: %s", task.id, exc)
        error = str(exc)
    except Exception as exc:  # the request's answer, not the server's end
        log.exception("prediction %s failed", task.id)
        error = f"{type(exc).__name__}: {exc}"
    try:
        with session_scope(settings) as session:
            answer_prediction(session, prediction_id=task.id, response=response, error=error)
            session.commit()
    except DATABASE_ERRORS:
        log.warning("could not record prediction %s's answer", task.id)
