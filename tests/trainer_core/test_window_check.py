"""The run checks every backend's optimizer windows against the epoch plan: a library that steps
elsewhere than the plan stops the run instead of training inexactly. Here the plan is cut with
K = 2 while Accelerate and the Trainer are told K = 4."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer_core.helpers import CLASSIFICATION, make_spec
from trainer_core.backends import get_backend
from trainer_core.data.loader import EpochLoader, EpochPlan
from trainer_core.loop.build import build_context, load_inputs
from trainer_core.loop.run import TrainingRun, WindowMismatch
from trainer_core.spec.callbacks import NULL_CALLBACK, never_stop


def _run_with_plan_k(backend: str, plan_k: int, out: Path) -> TrainingRun:
    spec = make_spec(
        CLASSIFICATION, backend=backend, gradient_accumulation_steps=4, num_train_epochs=1
    )
    ctx, _ = build_context(spec, out, load_inputs(spec), resume=False)
    plan = EpochPlan(
        ctx.data.train, batch_size=8, accumulation=plan_k, seed=spec.seed, pad_id=ctx.pad_id
    )
    ctx.loader = EpochLoader(plan)
    run = TrainingRun(ctx, NULL_CALLBACK, never_stop, progress_bar=False)
    try:
        get_backend(backend).run(run)
    finally:
        run.close()
    return run


@pytest.mark.parametrize("backend", ["accelerate", "trainer"])
def test_a_library_window_that_disagrees_with_the_plan_stops_the_run(
    backend: str, tmp_path: Path
) -> None:
    with pytest.raises(WindowMismatch, match="the library"):
        _run_with_plan_k(backend, 2, tmp_path)


@pytest.mark.parametrize("backend", ["accelerate", "trainer"])
def test_a_library_window_that_agrees_with_the_plan_trains(backend: str, tmp_path: Path) -> None:
    run = _run_with_plan_k(backend, 4, tmp_path)
    assert run.global_step == 4  # ceil(ceil(101 / 8) / 4) windows in the epoch
