"""The one call into the training core. Importing this module is cheap; calling it imports torch."""

from __future__ import annotations

from gradacc.settings import Settings
from trainer_core.spec.callbacks import StopCheck, TrainingCallback, TrainResult
from trainer_core.spec.job import JobSpec
from worker.child.grpo import run_grpo


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
    from trainer_core.train import train

    if settings.train_threads > 0:
        # The worker's share of the cores, split between the job's ranks on this machine.
        torch.set_num_threads(max(1, settings.train_threads // spec.processes_per_machine))
    if spec.method == "grpo":  # sampled, graded and trained window by window
        return run_grpo(spec, settings, job_id, callback=callback, should_stop=should_stop)

    # resume=True: a job handed over after its worker died continues from its last checkpoint.
    # A shared cache: a second job or a retry on the same data skips tokenization.
    cache = DataCache(settings.data_cache_dir, settings.data_cache_max_bytes)
    result: TrainResult = train(
        spec,
        settings.jobs_dir / job_id,
        callback=callback,
        should_stop=should_stop,
        resume=True,
        data_cache=cache,
        loader_workers=settings.loader_workers,
    )
    return result
