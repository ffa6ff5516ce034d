"""A job's one entry into the core: ``run_job(spec, output_dir, ...) -> TrainResult``, whatever its
method. SFT and DPO train through ``train`` (the loop's entry, with the data the spec names);
method ``grpo`` through the GRPO driver (``trainer_core.grpo``), which samples and grades window
after window and calls ``train`` once with the stream of rollouts. The worker's training child
and ``python -m trainer_core run`` both enter here.

Example:
    >>> spec = JobSpec(model="builtin:tiny-chat", dataset="builtin:arithmetic-prompts",
    ...                task="causal-lm", method="grpo", max_steps=2,
    ...                grpo={"group_size": 4, "grader": {"type": "string_check", "name": "eq",
    ...                      "operation": "eq", "input": "{{ sample.output_text }}",
    ...                      "reference": "{{ item.answer }}"}})
    >>> run_job(spec, "runs/grpo").status  # doctest: +SKIP
    'completed'
"""

from __future__ import annotations

from pathlib import Path

from trainer_core.data.cache import DataCache
from trainer_core.graders import Grading
from trainer_core.grpo.run import train_grpo_job
from trainer_core.spec.callbacks import (
    NULL_CALLBACK,
    StopCheck,
    TrainingCallback,
    TrainResult,
    never_stop,
)
from trainer_core.spec.job import JobSpec
from trainer_core.train import train


def run_job(
    spec: JobSpec,
    output_dir: Path | str,
    *,
    callback: TrainingCallback = NULL_CALLBACK,
    should_stop: StopCheck = never_stop,
    resume: bool = True,
    grading: Grading | None = None,
    data_cache: DataCache | None = None,
    loader_workers: int | None = None,
    progress_bar: bool = False,
) -> TrainResult:
    """Train ``spec`` in ``output_dir``. ``grading``: what a GRPO job's grader may call on (the
    sandbox's limits, a chat model for model graders); the others need none."""
    if spec.method == "grpo":
        return train_grpo_job(
            spec,
            output_dir,
            grading=grading,
            callback=callback,
            should_stop=should_stop,
            resume=resume,
        )
    return train(
        spec,
        output_dir,
        callback=callback,
        should_stop=should_stop,
        resume=resume,
        data_cache=data_cache,
        loader_workers=loader_workers,
        progress_bar=progress_bar,
    )
