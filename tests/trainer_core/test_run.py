"""A run end to end: metrics records, progress, cancellation, preemption and exact resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_core.helpers import (
    CHAT,
    CLASSIFICATION,
    final_weights,
    initial_weights,
    make_spec,
    max_abs_diff,
    run,
    tolerance,
)
from trainer_core.spec.callbacks import StopRequest, TrainingCallback

CLASSIFICATION_FIELDS = {"epoch", "train_loss", "eval_loss", "eval_accuracy", "eval_f1", "learning_rate",
                         "optimizer_steps", "samples_per_second", "peak_memory_bytes"}  # fmt: skip


class Recorder(TrainingCallback):
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def on_start(self, info: dict[str, Any]) -> None:
        self.events.append(("start", info))

    def on_progress(self, progress: dict[str, Any]) -> None:
        self.events.append(("progress", progress))

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        self.events.append(("epoch", record))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [payload for k, payload in self.events if k == kind]


class StopAfter:
    """should_stop that asks for ``request`` once ``micro_steps`` micro-steps have run."""

    def __init__(self, micro_steps: int, request: StopRequest) -> None:
        self.calls, self.limit, self.request = 0, micro_steps, request

    def __call__(self) -> StopRequest | None:
        self.calls += 1
        return self.request if self.calls >= self.limit else None


def test_learns_and_reports_every_epoch(tmp_path: Path) -> None:
    spec = make_spec(CLASSIFICATION, num_train_epochs=3, max_train_samples=600, max_eval_samples=200,
                     learning_rate=2e-3, per_device_train_batch_size=8, gradient_accumulation_steps=2)  # fmt: skip
    recorder = Recorder()
    result = run(spec, tmp_path, callback=recorder)
    records = recorder.of("epoch")
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert all(r.keys() >= CLASSIFICATION_FIELDS for r in records)
    assert records[-1]["eval_accuracy"] > records[0]["eval_accuracy"] + 0.05
    assert records[-1]["eval_accuracy"] > 0.7  # chance is 0.5
    start = recorder.of("start")[0]
    progress = recorder.of("progress")
    assert [p["step"] for p in progress] == list(range(1, start["total_steps"] + 1))
    assert start["total_steps"] == 3 * 38  # 600 rows / b=8 = 75 micro-batches, ceil(75 / K=2)
    assert {p["total_steps"] for p in progress} == {114}
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == result.metrics
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["optimizer_steps"] == 114
    assert (tmp_path / "model" / "model.safetensors").is_file()
    assert (tmp_path / "model" / "tokenizer.json").is_file()


@pytest.mark.parametrize("backend", ["pytorch", "accelerate", "trainer"])
def test_cancel_stops_between_micro_steps(tmp_path: Path, backend: str) -> None:
    stop = StopAfter(5, "cancel")
    result = run(make_spec(CLASSIFICATION, backend=backend, per_device_train_batch_size=4,
                           gradient_accumulation_steps=4), tmp_path, should_stop=stop)  # fmt: skip
    assert result.status == "cancelled"
    assert stop.calls == 5  # not one micro-step more
    assert result.summary["optimizer_steps"] == 1  # 5 micro-steps = 1 full window + 1
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("backend", ["pytorch", "accelerate", "trainer"])
def test_preempt_then_resume_equals_uninterrupted_run(tmp_path: Path, backend: str) -> None:
    spec = make_spec(CLASSIFICATION, backend=backend, per_device_train_batch_size=4,
                     gradient_accumulation_steps=4, num_train_epochs=3)  # fmt: skip
    clean = run(spec, tmp_path / "clean")
    # 26 micro-batches per epoch: micro-step 26 + 9 is inside epoch 2, and the preemption
    # lands at the next window boundary (micro-step 12 of epoch 2).
    first = run(spec, tmp_path / "resumed", should_stop=StopAfter(26 + 9, "preempt"))
    assert first.status == "preempted"
    state = json.loads((tmp_path / "resumed" / "checkpoint" / "gradacc_state.json").read_text())
    assert (state["epoch"], state["micro_step"]) == (1, 12)
    recorder = Recorder()
    second = run(spec, tmp_path / "resumed", callback=recorder)
    assert second.status == "completed"
    assert recorder.of("start")[0]["start_step"] == 7 + 3
    bound = tolerance(initial_weights(spec), final_weights(tmp_path / "clean"))
    assert (
        max_abs_diff(final_weights(tmp_path / "resumed"), final_weights(tmp_path / "clean"))
        <= bound
    )
    for a, b in zip(second.metrics, clean.metrics, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-5)
        assert a["optimizer_steps"] == b["optimizer_steps"]


def test_the_start_warns_of_what_its_author_may_not_expect(tmp_path: Path) -> None:
    """An effective batch over the training rows (one partial step an epoch), and rows that
    truncation leaves nothing to train (counted, left out): in the start info and the summary."""
    big = run(make_spec(CLASSIFICATION, max_train_samples=24, per_device_train_batch_size=8,
                        gradient_accumulation_steps=4, num_train_epochs=1), tmp_path / "big")  # fmt: skip
    (warning,) = big.summary["warnings"]
    assert "effective batch (32) is larger than the 24 training rows" in warning
    few = run(make_spec(CLASSIFICATION, max_train_samples=16, per_device_train_batch_size=8,
                        gradient_accumulation_steps=2, num_train_epochs=1), tmp_path / "few")  # fmt: skip
    assert few.summary["warnings"] == [
        "1 optimizer step per epoch (16 rows, effective batch 16): lower the effective batch for "
        "more updates"
    ]
    cut = run(make_spec(CHAT, max_train_samples=40, max_seq_length=16, num_train_epochs=1),
              tmp_path / "cut")  # fmt: skip
    dropped = cut.summary["rows_without_trained_tokens"]
    assert dropped["train"] > 0 and cut.summary["num_train_samples"] == 40 - dropped["train"]
    assert any("nothing to train after truncation at max_seq_length 16" in w
               for w in cut.summary["warnings"])  # fmt: skip
