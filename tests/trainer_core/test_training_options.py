"""Mixed precision, gradient checkpointing, the optimizers and max_steps in every backend: each
trains (and keeps accumulation exact where it changes the numbers), or is refused clearly."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from tests.trainer_core.helpers import (
    CAUSAL,
    CLASSIFICATION,
    Weights,
    final_weights,
    initial_weights,
    make_spec,
    max_abs_diff,
    run,
    tolerance,
)
from trainer_core.spec.errors import JobError
from trainer_core.spec.outputs import CHECKPOINT_DIR, CHECKPOINT_STATE

BACKENDS = ("pytorch", "accelerate", "trainer")
# bf16 rounds every matmul to 8 bits of mantissa, and how a product is blocked depends on the
# batch's shape, so (b, K) and (b*K, 1) cannot agree to float32 rounding. The bar: accumulation
# adds no more error than bf16 itself does (bf16 against float32 at the same batch), and stays
# within 0.5 % of the update. Measured on this test (SGD, whose update is proportional to the
# gradient): accumulation 0.14 % of the update, bf16 itself 0.16 %, in all three backends.
# (Under AdamW both are ~50 % on a tiny model: Adam turns rounding noise on near-zero gradients
# into full-size steps; docs/core.md.)
BF16_TOLERANCE = 5e-3


def _weights(tmp_path: Path, backend: str, b: int, k: int, **extra: Any) -> Weights:
    spec = make_spec(
        CAUSAL,
        backend=backend,
        per_device_train_batch_size=b,
        gradient_accumulation_steps=k,
        num_train_epochs=1,
        **extra,
    )
    out = tmp_path / f"{b}x{k}-{extra.get('mixed_precision', 'no')}"
    assert run(spec, out).status == "completed"
    return final_weights(out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_accumulation_adds_no_error_beyond_bf16(backend: str, tmp_path: Path) -> None:
    small = _weights(tmp_path, backend, 4, 4, optim="sgd", mixed_precision="bf16")
    large = _weights(tmp_path, backend, 16, 1, optim="sgd", mixed_precision="bf16")
    full = _weights(tmp_path, backend, 16, 1, optim="sgd")
    update = 1000 * tolerance(initial_weights(make_spec(CAUSAL)), full)
    accumulation, precision = max_abs_diff(small, large), max_abs_diff(large, full)
    assert precision > 0  # bf16 was really on
    assert accumulation <= 1.5 * precision
    assert accumulation <= BF16_TOLERANCE * update


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_checkpointing_keeps_accumulation_exact(backend: str, tmp_path: Path) -> None:
    small = _weights(tmp_path, backend, 4, 4, gradient_checkpointing=True)
    large = _weights(tmp_path, backend, 16, 1, gradient_checkpointing=True)
    assert max_abs_diff(small, large) <= tolerance(initial_weights(make_spec(CAUSAL)), large)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("optim", ["sgd", "adafactor", "adamw_torch_fused"])
def test_every_optimizer_trains_in_every_backend(backend: str, optim: str, tmp_path: Path) -> None:
    spec = make_spec(
        CLASSIFICATION, backend=backend, optim=optim, num_train_epochs=1, max_train_samples=32
    )
    start = initial_weights(spec)
    result = run(spec, tmp_path)
    assert result.status == "completed"
    assert max_abs_diff(start, final_weights(tmp_path)) > 0  # the optimizer moved the weights


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_steps_overrides_epochs(backend: str, tmp_path: Path) -> None:
    # 101 rows at 8 x 1: 13 optimizer steps an epoch; 16 steps = one epoch and 3 of the next.
    spec = make_spec(CLASSIFICATION, backend=backend, num_train_epochs=1, max_steps=16)
    result = run(spec, tmp_path)
    assert result.status == "completed"
    assert [m["optimizer_steps"] for m in result.metrics] == [13, 16]
    assert result.metrics[-1]["learning_rate"] == 0.0  # the linear schedule spans the 16 steps


def test_fp16_is_refused_on_cpu(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="fp16 needs a GPU"):
        make_spec(CLASSIFICATION, device="cpu", mixed_precision="fp16")
    if torch.cuda.is_available():  # "auto" is the GPU there, where fp16 runs (bench/gpu_check.sh)
        return
    spec = make_spec(CLASSIFICATION, device="auto", mixed_precision="fp16")
    with pytest.raises(JobError, match="fp16 needs a GPU") as refused:
        run(spec, tmp_path)  # no GPU here: refused before any training
    assert refused.value.param == "mixed_precision"


@pytest.mark.parametrize(
    ("backend", "strategy"),
    [("pytorch", "epoch"), ("pytorch", "steps"), ("pytorch", "no"), ("trainer", "no")],
)
def test_max_steps_ending_mid_run_saves_at_the_end_whatever_the_strategy(
    backend: str, strategy: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The last epoch is the one max_steps ends in (here the first of three asked for): the end
    of the run always saves, and the log counts the epochs that run."""
    spec = make_spec(CLASSIFICATION, backend=backend, num_train_epochs=3, max_steps=5,
                     save_strategy=strategy, save_steps=500)  # fmt: skip
    with caplog.at_level(logging.INFO, logger="trainer_core"):
        result = run(spec, tmp_path)
    assert result.status == "completed" and len(result.metrics) == 1
    state = json.loads((tmp_path / CHECKPOINT_DIR / CHECKPOINT_STATE).read_text())
    assert (state["global_step"], state["epoch"], state["micro_step"]) == (5, 1, 0)
    assert "epoch 1/1:" in caplog.text and "epoch 1/3" not in caplog.text
