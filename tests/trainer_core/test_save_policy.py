"""Every save the policy makes due is written exactly once, wherever its window falls: mid-epoch, on
an epoch's last window, on the run's last window; for ``save_steps``, the time interval and a
preemption alike. (A save that ``save_steps`` made due on an epoch's last window used to fall
between the step path, which saved mid-epoch only, and the epoch-end path, which saved for the
"steps" strategy only at the run's end: a job of one window an epoch kept no checkpoint until
its last step.) Saves are counted as the core reports them once on disk."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

import trainer_core.__main__ as cli
from tests.support import Hold, checkpoint_at, with_env
from tests.trainer_core.forked_cli import forked_cli
from tests.trainer_core.helpers import (
    CLASSIFICATION,
    final_weights,
    initial_weights,
    max_abs_diff,
    run,
    tolerance,
)
from trainer_core.spec.callbacks import StopRequest, TrainingCallback
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import CHECKPOINT_DIR, CHECKPOINT_STATE

# 96 rows / (4 x 2): 12 windows an epoch, 36 in all.
SPEC = {**CLASSIFICATION, "num_train_epochs": 3, "max_train_samples": 96, "max_eval_samples": 8,
        "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
        "learning_rate": 2e-3, "seed": 3, "save_strategy": "steps"}  # fmt: skip
# 24 rows / (4 x 6): the whole epoch is one window.
ONE_WINDOW = {**SPEC, "max_train_samples": 24, "gradient_accumulation_steps": 6}


class Saves(TrainingCallback):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_checkpoint(self, info: dict[str, Any]) -> None:
        self.steps.append(info["step"])


def saved_steps(tmp_path: Path, **spec: Any) -> list[int]:
    saves = Saves()
    run(JobSpec(**spec), tmp_path, callback=saves)
    return saves.steps


def test_save_steps_on_an_epoch_s_last_window_is_written_once(tmp_path: Path) -> None:
    """Steps 12 and 24 end epochs; 36 ends the run: each saved once, as 6, 18 and 30 are."""
    assert saved_steps(tmp_path, **SPEC, save_steps=6) == [6, 12, 18, 24, 30, 36]


def test_one_window_an_epoch_saves_after_every_epoch(tmp_path: Path) -> None:
    assert saved_steps(tmp_path / "steps", **ONE_WINDOW, save_steps=1) == [1, 2, 3]
    timed = {**ONE_WINDOW, "save_strategy": "epoch", "save_interval_seconds": 1e-6}
    assert saved_steps(tmp_path / "time", **timed) == [1, 2, 3]  # and not twice each


def test_a_run_ended_by_max_steps_mid_epoch_saves_its_last_window_once(tmp_path: Path) -> None:
    assert saved_steps(tmp_path, **SPEC, save_steps=6, max_steps=18) == [6, 12, 18]


def test_a_preemption_on_an_epoch_s_last_window_saves_it_and_resumes_exactly(
    tmp_path: Path,
) -> None:
    """Asked during step 12's window (epoch 1's last): saved at 12 once, then resumed there."""
    spec = JobSpec(**{**SPEC, "save_steps": 100})
    polls = 0

    def preempt_in_window_12() -> StopRequest | None:
        nonlocal polls
        polls += 1  # once a micro-step: step 12's window is micro-steps 23 and 24
        return "preempt" if polls >= 23 else None

    saves = Saves()
    first = run(spec, tmp_path / "preempted", callback=saves, should_stop=preempt_in_window_12)
    assert first.status == "preempted" and saves.steps == [12]
    resumed = Saves()
    assert run(spec, tmp_path / "preempted", callback=resumed).status == "completed"
    assert resumed.steps == [36]
    run(spec, tmp_path / "clean")
    clean = final_weights(tmp_path / "clean")
    assert max_abs_diff(final_weights(tmp_path / "preempted"), clean) <= tolerance(
        initial_weights(spec), clean
    )


@pytest.mark.parametrize("backend", ["pytorch", "accelerate", "trainer"])
def test_a_kill_after_step_7_resumes_from_step_5(tmp_path: Path, backend: str) -> None:
    """The issue's job: one window an epoch, ``save_steps: 5``, SIGKILL after step 7. The run
    resumes from step 5's checkpoint (it started over before) and ends with the uninterrupted
    run's weights."""
    spec = {**ONE_WINDOW, "backend": backend, "num_train_epochs": 9, "save_steps": 5}
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    hold = Hold(tmp_path, 7)
    # The killed run is a process forked from this one (``forked_cli``: no cold import).
    args = ["run", str(spec_file), "--output-dir", str(tmp_path / "killed")]
    victim = forked_cli(args, with_env(hold.env()))
    hold.held(process=victim)
    checkpoint_at(tmp_path / "killed", 5)  # written in the background: on disk before the kill
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL
    hold.release()
    state = json.loads((tmp_path / "killed" / CHECKPOINT_DIR / CHECKPOINT_STATE).read_text())
    assert state["global_step"] == 5
    assert cli.main(["run", str(spec_file), "--output-dir", str(tmp_path / "killed")]) == 0
    assert cli.main(["run", str(spec_file), "--output-dir", str(tmp_path / "clean")]) == 0
    clean = final_weights(tmp_path / "clean")
    bound = tolerance(initial_weights(JobSpec(**spec)), clean)
    assert max_abs_diff(final_weights(tmp_path / "killed"), clean) <= bound
