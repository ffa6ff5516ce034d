"""Step records: the window's exact mean loss, the pre-clip gradient norm, alike in every backend;
the default interval; evaluation every ``eval_steps``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer_core.helpers import CLASSIFICATION, make_spec, run
from trainer_core.spec.job import JobSpec
from trainer_core.testing.recorder import Recorder


def steps_of(spec: JobSpec, out: Path) -> Recorder:
    recorder = Recorder()
    run(spec, out, callback=recorder)
    return recorder


def test_window_losses_add_up_to_the_epoch_loss_in_every_backend(tmp_path: Path) -> None:
    # 101 rows, windows of 16 rows: six full ones and a last one of 5 rows.
    common = {"num_train_epochs": 1, "logging_steps": 1, "gradient_accumulation_steps": 2}
    by_backend = {
        backend: steps_of(make_spec(CLASSIFICATION, backend=backend, **common), tmp_path / backend)
        for backend in ("pytorch", "accelerate", "trainer")
    }
    reference = by_backend["pytorch"]
    rows = [16] * 6 + [5]
    assert [r["step"] for r in reference.steps] == list(range(1, 8))
    weighted = sum(r["train_loss"] * n for r, n in zip(reference.steps, rows, strict=True))
    assert weighted / 101 == pytest.approx(reference.epochs[0]["train_loss"], rel=1e-6)
    assert reference.steps[-1]["eta_seconds"] == 0
    assert all(r["grad_norm"] > 0 for r in reference.steps)
    rates = [r["learning_rate"] for r in reference.steps]
    assert rates == sorted(rates, reverse=True) and rates[0] > rates[-1]  # linear decay
    for backend, other in by_backend.items():
        for a, b in zip(reference.steps, other.steps, strict=True):
            assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4), backend
            assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4), backend


def test_default_interval_and_eval_steps(tmp_path: Path) -> None:
    # 400 rows, b 2, K 1: 200 steps an epoch; the default gives a record every 4 steps.
    spec = make_spec(CLASSIFICATION, num_train_epochs=1, max_train_samples=400,
                     per_device_train_batch_size=2, eval_strategy="steps", eval_steps=50)  # fmt: skip
    recorder = steps_of(spec, tmp_path)
    evaluations = [50, 100, 150, 200]
    assert [r["step"] for r in recorder.steps] == sorted({*range(4, 201, 4), *evaluations})
    assert [r["step"] for r in recorder.steps if "eval_loss" in r] == evaluations
    assert recorder.steps[-1]["epoch"] == 1.0


def test_eval_steps_without_the_steps_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="eval_steps"):
        JobSpec(**CLASSIFICATION, eval_steps=10)


def test_report_to_tensorboard_writes_step_and_epoch_scalars(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    spec = make_spec(CLASSIFICATION, num_train_epochs=1, logging_steps=1, report_to=["tensorboard"])
    recorder = steps_of(spec, tmp_path)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    losses = events.Scalars("train/train_loss")
    assert [e.step for e in losses] == [r["step"] for r in recorder.steps]
    assert [e.value for e in losses] == pytest.approx([r["train_loss"] for r in recorder.steps])
    (epoch,) = events.Scalars("epoch/eval_loss")
    assert epoch.value == pytest.approx(recorder.epochs[0]["eval_loss"])
