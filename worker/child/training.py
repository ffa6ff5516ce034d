"""The one call into the training core. Importing this module is cheap; calling it imports torch."""

from __future__ import annotations

from pathlib import Path

from trainer_core.callbacks import StopCheck, TrainingCallback, TrainResult
from trainer_core.spec import JobSpec


def run_training(
    spec: JobSpec,
    output_dir: Path,
    *,
    callback: TrainingCallback,
    should_stop: StopCheck,
    threads: int = 0,
) -> TrainResult:
    # Imported here so the worker's parent process (and the API) never load torch.
    import torch

    from trainer_core.train import train

    if threads > 0:
        # The worker's share of the cores, split between the job's ranks on this machine.
        torch.set_num_threads(max(1, threads // spec.processes_per_machine))

    # resume=True: a job handed over after its worker died continues from its last checkpoint.
    result: TrainResult = train(
        spec, output_dir, callback=callback, should_stop=should_stop, resume=True
    )
    return result
