"""The one call into the training core (``trainer_core.entry.run_job``, whatever the job's method),
with the worker's settings. Importing this module is cheap (the graders are torch-free);
calling it imports torch."""

from __future__ import annotations

from gradacc.db import get_sessionmaker, session_scope
from gradacc.grading import sandbox_limits
from gradacc.serving.ask import served_chat
from gradacc.settings import Settings
from gradacc.tables import Job
from trainer_core.graders import ChatFn, Grading
from trainer_core.spec.callbacks import StopCheck, TrainingCallback, TrainResult
from trainer_core.spec.job import JobSpec


def run_training(
    spec: JobSpec,
    settings: Settings,
    job_id: str,
    *,
    callback: TrainingCallback,
    should_stop: StopCheck,
) -> TrainResult:
    """Train ``job_id`` in its folder, with the worker's settings: its training threads, the
    shared data cache and the loader workers (every rank of a job alike)."""
    # Imported here so the worker's parent process (and the API) never load torch.
    import torch

    from trainer_core.data.cache import DataCache
    from trainer_core.entry import run_job

    if settings.train_threads > 0:
        # The worker's share of the cores, split between the job's ranks on this machine.
        torch.set_num_threads(max(1, settings.train_threads // spec.processes_per_machine))
    # resume=True: a job handed over after its worker died continues from its last checkpoint.
    # A shared cache: a second job or a retry on the same data skips tokenization. A GRPO job's
    # graders: python ones in the sandbox at the operator's limits, model ones asked as the
    # job's tenant would ask them (``judge_chat``).
    chat = judge_chat(settings, job_id, should_stop) if spec.grpo is not None else None
    grading = Grading(chat=chat, limits=sandbox_limits(settings))
    cache = DataCache(settings.data_cache_dir, settings.data_cache_max_bytes)
    return run_job(
        spec,
        settings.jobs_dir / job_id,
        callback=callback,
        should_stop=should_stop,
        resume=True,
        grading=grading,
        data_cache=cache,
        loader_workers=settings.loader_workers,
    )


def judge_chat(settings: Settings, job_id: str, should_stop: StopCheck) -> ChatFn:
    """A model grader's chat for the job's tenant (``served_chat``): an upstream route's server,
    or this server's own model (a built-in, the tenant's ``ft:`` model or checkpoint) on a
    worker's predict server, an idle worker's first. While none can answer (the predict servers
    are starting, or busy), it waits and asks again until the job is told to stop."""
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        tenant = job.tenant if job is not None else ""  # gone: nothing of anyone's answers
    sessions = get_sessionmaker(settings)
    return served_chat(sessions, settings, tenant, waiting=lambda: should_stop() is None)
