"""The effective batch is the user's, the micro-batch is the machine's: "auto" picks the largest
micro-batch within the budget, and a run that runs out of memory mid-epoch halves it, doubles K,
retries the window, and ends with the weights of a run that never did."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.trainer_core.helpers import (
    CLASSIFICATION,
    final_weights,
    initial_weights,
    make_spec,
    max_abs_diff,
    run,
    tolerance,
)
from trainer_core.loop.build import build_context, load_inputs
from trainer_core.spec.callbacks import TrainingCallback
from trainer_core.spec.errors import OutOfMemory
from trainer_core.spec.job import JobSpec
from trainer_core.testing.failpoints import OOM_ABOVE

BACKENDS = ("pytorch", "accelerate", "trainer")


class Recorder(TrainingCallback):
    """Keeps the batch-size reports; at optimizer step ``oom_at`` turns the failpoint on."""

    def __init__(self, oom_at: int | None = None, limit: int = 4) -> None:
        self.sizes: list[dict[str, Any]] = []
        self.oom_at, self.limit = oom_at, limit

    def on_batch_size(self, info: dict[str, Any]) -> None:
        self.sizes.append(info)

    def on_progress(self, progress: dict[str, Any]) -> None:
        if progress["step"] == self.oom_at:
            os.environ[OOM_ABOVE] = str(self.limit)


@pytest.fixture(autouse=True)
def _no_failpoint() -> Iterator[None]:
    os.environ.pop(OOM_ABOVE, None)
    yield
    os.environ.pop(OOM_ABOVE, None)  # the tests set it directly (mid-run): never leak it


def test_the_spec_derives_k_and_says_which_micro_batches_divide() -> None:
    spec = make_spec(CLASSIFICATION, per_device_train_batch_size=4, effective_batch_size=32)
    assert spec.gradient_accumulation_steps == 8
    with pytest.raises(ValidationError) as refused:
        make_spec(CLASSIFICATION, per_device_train_batch_size=3, effective_batch_size=32)
    (error,) = refused.value.errors()
    assert error["loc"] == ("effective_batch_size",)
    assert "could be one of 1, 2, 4, 8, 16, 32" in error["msg"]
    with pytest.raises(ValidationError, match="required when per_device_train_batch_size"):
        make_spec(CLASSIFICATION, per_device_train_batch_size="auto")


def test_auto_picks_the_largest_micro_batch_within_the_budget(tmp_path: Path) -> None:
    probe = make_spec(CLASSIFICATION, per_device_train_batch_size="auto", effective_batch_size=32)
    _, everything_fits = build_context(probe, tmp_path / "a", load_inputs(probe), resume=False)
    sizes = {t["micro_batch_size"]: t["bytes"] for t in everything_fits.detail["tried"]}
    assert everything_fits.size == 32 and everything_fits.accumulation == 1
    # A budget between what 4 and 8 rows need: 4 rows it is, K = 8, the effective batch kept.
    budget = (sizes[4] + sizes[8]) // 2
    spec = probe.model_copy(update={"max_memory_bytes": budget})
    ctx, choice = build_context(spec, tmp_path / "b", load_inputs(spec), resume=False)
    assert (choice.size, choice.accumulation, choice.reason) == (4, 8, "probe")
    assert (ctx.micro_batch_size, ctx.accumulation) == (4, 8)
    assert sizes[4] <= budget < sizes[8]
    assert [t["fits"] for t in choice.detail["tried"]] == [True, True, True, False]


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_memory_mid_epoch_keeps_the_training(backend: str, tmp_path: Path) -> None:
    spec = make_spec(
        CLASSIFICATION,
        backend=backend,
        per_device_train_batch_size=8,
        effective_batch_size=16,
        num_train_epochs=1,
    )
    clean = run(spec, tmp_path / "clean")
    recorder = Recorder(oom_at=2, limit=4)  # from the third window on, 8 rows do not fit
    hit = run(spec, tmp_path / "hit", callback=recorder)
    assert clean.status == hit.status == "completed"
    assert [(s["micro_batch_size"], s["gradient_accumulation_steps"]) for s in recorder.sizes] == [
        (8, 2),
        (4, 4),
    ]
    assert recorder.sizes[1]["reason"] == "out_of_memory"
    assert hit.metrics[0]["optimizer_steps"] == clean.metrics[0]["optimizer_steps"]
    clean_weights = final_weights(tmp_path / "clean")
    bound = tolerance(initial_weights(spec), clean_weights)
    assert max_abs_diff(final_weights(tmp_path / "hit"), clean_weights) <= bound
    assert abs(hit.metrics[0]["train_loss"] - clean.metrics[0]["train_loss"]) <= 1e-5


def test_out_of_memory_at_every_size_fails_with_what_it_tried(tmp_path: Path) -> None:
    os.environ[OOM_ABOVE] = "0"  # not even one row fits
    spec = make_spec(CLASSIFICATION, per_device_train_batch_size=8, num_train_epochs=1)
    with pytest.raises(OutOfMemory, match="micro-batch sizes 8, 4, 2, 1") as failed:
        run(spec, tmp_path)
    assert failed.value.code == "out_of_memory"
    assert failed.value.param == "per_device_train_batch_size"


def test_auto_refuses_a_budget_that_fits_nothing(tmp_path: Path) -> None:
    spec = JobSpec(
        **CLASSIFICATION,
        per_device_train_batch_size="auto",
        effective_batch_size=8,
        max_memory_bytes=1024,
    )
    with pytest.raises(OutOfMemory, match="not even 1 row fits"):
        build_context(spec, tmp_path, load_inputs(spec), resume=False)
