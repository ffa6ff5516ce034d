"""The predict server's loop: take the oldest pending request, load (or reuse) its model, answer.
On the worker's GPU when the worker holds no job, else on the CPU, so a prediction never takes
memory from a training job. torch and transformers are imported in a thread beside the loop, so
the server polls at once and the first request does not pay for the whole import."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradacc.db import DATABASE_ERRORS, session_scope
from gradacc.predictions import answer_prediction, take_prediction
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.tables import Job, Worker
from worker.predict.render import RenderLimits, RenderRefused

if TYPE_CHECKING:
    import torch

    from worker.predict.models import ModelCache

log = logging.getLogger(__name__)


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
        task = Task(taken.id, dict(taken.request), folder, spec.get("task") == "causal-lm",
                    int(spec.get("max_seq_length", 128)))  # fmt: skip
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


def answer(
    cache: ModelCache, task: Task, device: torch.device, limits: RenderLimits
) -> dict[str, Any]:
    from worker.predict.models import classify, generate

    loaded = cache.get(task.folder, causal=task.causal, device=device)
    if task.causal:
        return generate(loaded, task.request, limits)
    return classify(loaded, task.request["inputs"], task.max_length)


def _import_models() -> None:
    import worker.predict.models  # noqa: F401  (torch and transformers, once)


class _Answerer:
    """Answers a task with the server's models (the cache is built at the first request, once
    the imports are done) and its render limits."""

    def __init__(self, settings: Settings, worker: str) -> None:
        self.settings, self.worker = settings, worker
        self.cache: ModelCache | None = None
        self.limits = RenderLimits(timeout_s=settings.predict_render_timeout_s,
                                   memory_bytes=settings.predict_render_memory_mb * 2**20)  # fmt: skip

    def __call__(self, task: Task) -> dict[str, Any]:
        if self.cache is None:
            from worker.predict.models import ModelCache

            self.cache = ModelCache(self.settings.predict_cache_models)
        return answer(self.cache, task, _device(self.settings, self.worker), self.limits)


def serve(settings: Settings, worker: str, stop: threading.Event) -> None:
    parent = os.getppid()
    if parent == 1:  # the worker died while this process started: nobody to serve
        return
    # torch and transformers are imported beside the loop, not before it: the loop answers
    # "model gone" at once, and the first real request waits only for what is left of the import.
    threading.Thread(target=_import_models, name="predict-imports", daemon=True).start()
    log.info("predict server of %s ready (up to %d models)", worker, settings.predict_cache_models)
    answerer = _Answerer(settings, worker)
    while not stop.is_set() and os.getppid() == parent:  # the worker went: so does this
        try:
            task, _ = _take(settings, worker)
        except DATABASE_ERRORS:
            stop.wait(1.0)
            continue
        if task is None:
            stop.wait(settings.predict_poll_interval_s)
            continue
        _respond(settings, task, answerer)


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
