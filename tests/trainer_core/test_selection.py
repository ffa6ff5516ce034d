"""Early stopping and best-model selection: the same decisions in every backend, checked against
the Trainer's rules written out plainly; the final model is the best checkpoint's weights; a
kill -9 and resume keeps the best-so-far and the patience counter."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

import trainer_core.__main__ as cli
from tests.support import Hold, checkpoint_at, with_env
from tests.trainer_core.forked_cli import forked_cli
from tests.trainer_core.helpers import CLASSIFICATION, final_weights, max_abs_diff
from trainer_core.spec.job import JobSpec
from trainer_core.testing.recorder import Recorder
from trainer_core.train import train

# 64 rows, b 4, K 2: 8 optimizer steps an epoch, an evaluation (and a save) every 2. The metric
# is eval_loss with greater_is_better: the loss falls, so the "best" is an early checkpoint and
# the final model/ must be rolled back to it. A threshold of 10 makes no evaluation an
# improvement for patience: the run stops at the 5th evaluation (step 10, inside epoch 2).
SELECTING = {**CLASSIFICATION, "num_train_epochs": 3, "max_train_samples": 64,
             "max_eval_samples": 32, "per_device_train_batch_size": 4,
             "gradient_accumulation_steps": 2, "learning_rate": 3e-3, "seed": 3,
             "eval_strategy": "steps", "eval_steps": 2, "logging_steps": 2,
             "save_strategy": "steps", "save_steps": 2, "load_best_model_at_end": True,
             "metric_for_best_model": "eval_loss", "greater_is_better": True,
             "early_stopping_patience": 4, "early_stopping_threshold": 10.0}  # fmt: skip
STOP_STEP = 10


def reference(evals: list[tuple[int, float]], spec: dict[str, Any]) -> tuple[int, int | None]:
    """EarlyStoppingCallback and the Trainer's best metric, plainly: (best step, stop step)."""
    greater, threshold = spec["greater_is_better"], spec["early_stopping_threshold"]
    best: float | None = None
    best_step, counter = 0, 0
    for step, value in evals:
        gain = None if best is None else (value - best if greater else best - value)
        counter = 0 if gain is None or gain > threshold else counter + 1
        if gain is None or gain > 0:
            best, best_step = value, step
        if counter >= spec["early_stopping_patience"]:
            return best_step, step
    return best_step, None


def _evals(recorder: Recorder) -> list[tuple[int, float]]:
    return [(r["step"], r["eval_loss"]) for r in recorder.steps if "eval_loss" in r]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any], Any]]:
    out = {}
    for backend in ("pytorch", "accelerate", "trainer"):
        folder = tmp_path_factory.mktemp(backend)
        recorder = Recorder()
        result = train(JobSpec(**SELECTING, backend=backend), folder, callback=recorder)
        out[backend] = (folder, result.summary, _evals(recorder))
    return out


@pytest.mark.parametrize("backend", ["pytorch", "accelerate", "trainer"])
def test_decisions_follow_the_trainers_rules(runs: dict[str, Any], backend: str) -> None:
    _, summary, evals = runs[backend]
    assert [step for step, _ in evals] == [2, 4, 6, 8, 10]  # once each, the epoch end included
    best, stop = reference(evals, SELECTING)
    assert stop == STOP_STEP
    assert summary["stop_reason"] == "early_stopping"
    assert summary["optimizer_steps"] == stop
    assert summary["best_step"] == best == summary["model_step"]
    assert summary["best_metric"] == max(value for _, value in evals)
    assert best != stop  # the falling loss makes an early step "best": model/ is rolled back


@pytest.mark.parametrize("backend", ["pytorch", "accelerate", "trainer"])
def test_final_model_is_the_best_checkpoint(runs: dict[str, Any], backend: str) -> None:
    folder, summary, _ = runs[backend]
    best = summary["best_step"]
    # save_total_limit 1: the latest checkpoint, plus the best one kept beside it.
    kept = sorted(p.name for p in folder.iterdir() if p.name.startswith("checkpoint"))
    assert kept == ["checkpoint", f"checkpoint-{best}"]
    best_weights = load_file(str(folder / f"checkpoint-{best}" / "model.safetensors"))
    last_weights = load_file(str(folder / "checkpoint" / "model.safetensors"))
    model = final_weights(folder)
    assert max_abs_diff(model, best_weights) == 0.0
    assert max_abs_diff(model, last_weights) > 1e-4


def test_backends_agree(runs: dict[str, Any]) -> None:
    (_, reference_summary, reference_evals), *others = runs.values()
    for _, summary, evals in others:
        assert summary["best_step"] == reference_summary["best_step"]
        assert summary["optimizer_steps"] == reference_summary["optimizer_steps"]
        for (step, value), (ref_step, ref_value) in zip(evals, reference_evals, strict=True):
            assert step == ref_step and value == pytest.approx(ref_value, abs=1e-5)


def test_kill_and_resume_keeps_the_selection(runs: dict[str, Any], tmp_path: Path) -> None:
    """Killed after the 3rd evaluation (patience counter 2, checkpoint at 6), the resumed run
    stops at the same step with the same best model as the uninterrupted pytorch run above."""
    clean, clean_summary, evals = runs["pytorch"]
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({**SELECTING, "backend": "pytorch"}))

    hold = Hold(tmp_path, 7)
    # The killed run is a process forked from this one (``forked_cli``: no cold import).
    args = ["run", str(spec_file), "--output-dir", str(tmp_path / "crashed"), "--no-cache"]
    victim = forked_cli(args, with_env(hold.env()))
    hold.held(process=victim)
    saved = checkpoint_at(tmp_path / "crashed", 6)  # in the background: it may land after 7
    early = [(step, loss) for step, loss in evals if step <= 6]
    assert saved["selection"]["patience_counter"] == 2
    assert saved["selection"]["best_step"] == max(early, key=lambda e: e[1])[0]
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL
    hold.release()
    # The resume in this process (the CLI's main): it has only the killed run's checkpoint to go
    # on; test_crash.py resumes in a process of its own.
    args = ["run", str(spec_file), "--output-dir", str(tmp_path / "crashed"), "--no-cache"]
    assert cli.main(args) == 0

    resumed = json.loads((tmp_path / "crashed" / "summary.json").read_text())
    for key in ("stop_reason", "optimizer_steps", "best_step", "best_metric", "patience_counter"):
        assert resumed[key] == clean_summary[key], key
    assert resumed["optimizer_steps"] == STOP_STEP
    diff = max_abs_diff(final_weights(clean), final_weights(tmp_path / "crashed"))
    assert diff <= 1e-6
