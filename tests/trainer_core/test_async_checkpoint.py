"""Checkpoints written in the background: kill -9 during a write and the previous checkpoint is the
one a resume uses (ending equal to an uninterrupted run); the policy fields decide when to save;
the last N are kept."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import trainer_core.checkpoint.writer as ac
from tests.trainer_core.forked_cli import forked
from tests.trainer_core.helpers import (
    CLASSIFICATION,
    final_weights,
    initial_weights,
    max_abs_diff,
    run,
    tolerance,
)
from trainer_core.spec.callbacks import TrainingCallback
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import CHECKPOINT_STATE
from trainer_core.train import train

SPEC = {**CLASSIFICATION, "num_train_epochs": 3, "max_train_samples": 96, "max_eval_samples": 16,
        "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
        "learning_rate": 2e-3, "seed": 3}  # fmt: skip


def stalled_writer(spec_file: Path, marker: Path, out: Path) -> int:
    """The run whose second save (epoch 2's end) writes its weights, says so, then hangs until
    it is killed: a background write caught in the middle, deterministically. Run in a forked
    process (``forked``: the patch is that process's alone)."""
    real, calls = ac.write_files, []

    def stalled(folder: Path, snap: Any) -> None:
        calls.append(folder)
        if len(calls) == 2:
            ac.save_file(snap.weights, str(folder / "model.safetensors"))
            marker.write_text("mid-write")
            time.sleep(600)
        real(folder, snap)

    ac.write_files = stalled
    train(JobSpec.model_validate_json(spec_file.read_text()), out)
    return 0


def _state(folder: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((folder / CHECKPOINT_STATE).read_text())
    return state


def test_kill_during_background_write_resumes_from_the_previous_checkpoint(
    tmp_path: Path,
) -> None:
    spec = JobSpec(**SPEC)
    (tmp_path / "spec.json").write_text(spec.model_dump_json())
    marker, out = tmp_path / "writing", tmp_path / "crashed"
    command = [sys.executable, "-c", "stalled_writer", str(tmp_path / "spec.json")]
    body = partial(stalled_writer, tmp_path / "spec.json", marker, out)
    victim = forked(command, body, {**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert victim.poll() is None, "the job ended before its second save"
        assert time.monotonic() < deadline, "the second save never started"
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL

    checkpoint = out / "checkpoint"
    assert _state(checkpoint)["epoch"] == 1  # epoch 1's checkpoint: the one being replaced
    half = out / "checkpoint.tmp"
    assert (half / "model.safetensors").is_file() and not (half / CHECKPOINT_STATE).exists()

    resumed = run(spec, out)
    assert resumed.summary["start_epoch"] == 1 and resumed.status == "completed"
    assert [m["epoch"] for m in resumed.metrics] == [1, 2, 3]
    assert not half.exists()  # cleared by the next save
    clean = run(spec, tmp_path / "clean")
    bound = tolerance(initial_weights(spec), final_weights(tmp_path / "clean"))
    assert max_abs_diff(final_weights(out), final_weights(tmp_path / "clean")) <= bound
    for a, b in zip(resumed.metrics, clean.metrics, strict=True):
        assert abs(a["eval_loss"] - b["eval_loss"]) <= 1e-5 * abs(b["eval_loss"])


class Saves(TrainingCallback):
    def __init__(self) -> None:
        self.saves: list[dict[str, Any]] = []

    def on_checkpoint(self, info: dict[str, Any]) -> None:
        assert (Path(info["path"]) / CHECKPOINT_STATE).is_file()  # reported once it is on disk
        self.saves.append(info)


def test_policy_steps_keeps_the_last_n(tmp_path: Path) -> None:
    # 96 rows / (4 x 2) = 12 steps an epoch, 36 in all; every 5 steps plus the end of training.
    spec = JobSpec(**{**SPEC, "save_strategy": "steps", "save_steps": 5, "save_total_limit": 3})
    saves = Saves()
    run(spec, tmp_path, callback=saves)
    assert [s["step"] for s in saves.saves] == [5, 10, 15, 20, 25, 30, 35, 36]
    kept = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("checkpoint"))
    assert kept == ["checkpoint", "checkpoint-30", "checkpoint-35"]
    assert _state(tmp_path / "checkpoint")["global_step"] == 36
    assert _state(tmp_path / "checkpoint-30")["global_step"] == 30


def test_policy_no_saves_only_at_the_end(tmp_path: Path) -> None:
    saves = Saves()
    run(JobSpec(**{**SPEC, "save_strategy": "no"}), tmp_path, callback=saves)
    assert [(s["epoch"], s["step"]) for s in saves.saves] == [(3, 36)]


def test_policy_time_saves_within_an_epoch(tmp_path: Path) -> None:
    # An interval shorter than one step: every window ends with a save, mid-epoch included.
    saves = Saves()
    spec = JobSpec(**{**SPEC, "num_train_epochs": 1, "save_interval_seconds": 1e-6})
    run(spec, tmp_path, callback=saves)
    assert [s["step"] for s in saves.saves] == list(range(1, 13))


def test_the_writer_thread_yields_the_cpu_to_training() -> None:
    """The background write runs at nice 19 in its own thread; the training thread keeps its
    priority (bench/real_size.py: the write cost the next epoch ~4 % before, within noise after)."""
    import os
    import threading

    from trainer_core.checkpoint.writer import WRITER_NICE, yield_to_training

    mine = os.getpriority(os.PRIO_PROCESS, 0)
    seen: list[int] = []

    def writer() -> None:
        yield_to_training()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    assert seen == [WRITER_NICE]
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine
