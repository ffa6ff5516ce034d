"""kill -9 in the middle of epoch 2, run again: the job resumes from its last checkpoint and ends
with the weights and metrics of a run that was never interrupted."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import trainer_core.__main__ as cli
from tests.support import Hold, with_env
from tests.trainer_core.forked_cli import forked_cli
from tests.trainer_core.helpers import (
    CLASSIFICATION,
    final_weights,
    initial_weights,
    max_abs_diff,
    tolerance,
)
from trainer_core.spec.job import JobSpec

# 61 micro-batches an epoch: its last window holds one of three (it was 1,000 rows, 250
# micro-batches, the same short window, four times the training).
SPEC = {**CLASSIFICATION, "backend": "pytorch", "num_train_epochs": 3, "max_train_samples": 244,
        "max_eval_samples": 50, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 3,
        "learning_rate": 2e-3}  # fmt: skip


STEPS_PER_EPOCH = 21  # ceil(244 rows / (4 x 3))
HOLD_STEP = STEPS_PER_EPOCH + 8  # in the middle of epoch 2, after epoch 1's checkpoint


def _start(
    spec_file: Path, out: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m trainer_core run``, forked from this process (``forked_cli``: a process of its
    own without the cold import of torch and the core)."""
    return forked_cli(["run", str(spec_file), "--output-dir", str(out)], with_env(env or {}))


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_sigkill_mid_epoch_then_resume_equals_clean_run(tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(SPEC))
    # The uninterrupted reference runs in this process (the CLI's main, as the process would);
    # the killed run and its resume are processes of their own.
    assert cli.main(["run", str(spec_file), "--output-dir", str(tmp_path / "clean")]) == 0

    hold = Hold(tmp_path, HOLD_STEP)
    victim = _start(spec_file, tmp_path / "crashed", hold.env())
    hold.held(process=victim)  # parked in epoch 2: it cannot finish before the kill
    assert len(_lines(tmp_path / "crashed" / "metrics.jsonl")) == 1
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL
    assert not (tmp_path / "crashed" / "summary.json").exists()
    hold.release()

    again = _start(spec_file, tmp_path / "crashed")
    assert again.wait(timeout=300) == 0
    clean_metrics = [json.loads(x) for x in _lines(tmp_path / "clean" / "metrics.jsonl")]
    resumed_metrics = [json.loads(x) for x in _lines(tmp_path / "crashed" / "metrics.jsonl")]
    assert [m["epoch"] for m in resumed_metrics] == [1, 2, 3]
    for a, b in zip(resumed_metrics, clean_metrics, strict=True):
        assert abs(a["eval_loss"] - b["eval_loss"]) <= 1e-5 * abs(b["eval_loss"])
        assert a["optimizer_steps"] == b["optimizer_steps"]
    clean_weights = final_weights(tmp_path / "clean")
    bound = tolerance(initial_weights(JobSpec(**SPEC)), clean_weights)
    assert max_abs_diff(final_weights(tmp_path / "crashed"), clean_weights) <= bound
