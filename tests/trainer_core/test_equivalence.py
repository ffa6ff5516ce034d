"""The product's promise: (b, K) and (b·K, 1) give the same weights, in every backend, for both
tasks — with a partial last window, a ragged last micro-batch, clipping that fires, 2 shuffled
epochs — and the three backends agree with each other."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

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

TASKS = {"classification": CLASSIFICATION, "causal-lm": CAUSAL}
BACKENDS = ("pytorch", "accelerate", "trainer")
RunFn = Callable[..., tuple[Weights, list[dict[str, Any]]]]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> RunFn:
    """Train each (task, backend, b, K, extra) once per module and cache its weights and metrics."""
    cache: dict[tuple[Any, ...], tuple[Weights, list[dict[str, Any]]]] = {}

    def get(
        task: str, backend: str, b: int, k: int, **extra: Any
    ) -> tuple[Weights, list[dict[str, Any]]]:
        key = (task, backend, b, k, tuple(sorted(extra.items())))
        if key not in cache:
            spec = make_spec(
                TASKS[task],
                backend=backend,
                per_device_train_batch_size=b,
                gradient_accumulation_steps=k,
                **extra,
            )
            out = tmp_path_factory.mktemp(f"{task}-{backend}-{b}x{k}")
            result = run(spec, out)
            assert result.status == "completed"
            cache[key] = (final_weights(out), result.metrics)
        return cache[key]

    return get


@pytest.fixture(scope="module")
def initial() -> dict[str, Weights]:
    return {task: initial_weights(make_spec(cfg)) for task, cfg in TASKS.items()}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("task", TASKS)
def test_accumulated_equals_large_batch(
    trained: RunFn, initial: dict[str, Weights], task: str, backend: str
) -> None:
    accumulated, acc_metrics = trained(task, backend, 4, 4)
    large, large_metrics = trained(task, backend, 16, 1)
    bound = tolerance(initial[task], large)
    assert bound > 1e-6, "training must move the weights for the comparison to mean anything"
    assert max_abs_diff(accumulated, large) <= bound
    # The logged loss is the window mean, so it matches the large batch's too.
    for a, b in zip(acc_metrics, large_metrics, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["optimizer_steps"] == b["optimizer_steps"]


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("backend", ["accelerate", "trainer"])
def test_backends_agree_with_plain_loop(
    trained: RunFn, initial: dict[str, Weights], task: str, backend: str
) -> None:
    reference, ref_metrics = trained(task, "pytorch", 4, 4)
    other, other_metrics = trained(task, backend, 4, 4)
    assert max_abs_diff(reference, other) <= tolerance(initial[task], reference)
    assert [m["optimizer_steps"] for m in ref_metrics] == [
        m["optimizer_steps"] for m in other_metrics
    ]
    for a, b in zip(ref_metrics, other_metrics, strict=True):
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-4)


def test_clipping_fires(trained: RunFn, initial: dict[str, Weights]) -> None:
    """Without this, the equivalence tests could pass with clipping that never changes anything."""
    clipped, _ = trained("causal-lm", "pytorch", 16, 1)
    unclipped, _ = trained("causal-lm", "pytorch", 16, 1, max_grad_norm=0.0)
    assert max_abs_diff(clipped, unclipped) > 10 * tolerance(initial["causal-lm"], clipped)


def test_steps_and_schedule(trained: RunFn) -> None:
    """ceil(micro-batches / K) optimizer steps per epoch, and the linear schedule ends at 0."""
    _, metrics = trained("classification", "trainer", 4, 4)
    micro_batches = -(-101 // 4)  # 26, the last one ragged
    per_epoch = -(-micro_batches // 4)  # 7, the last window partial
    assert [m["optimizer_steps"] for m in metrics] == [per_epoch, 2 * per_epoch]
    assert metrics[-1]["learning_rate"] == 0.0
    assert metrics[0]["learning_rate"] == pytest.approx(5e-3 * per_epoch / (2 * per_epoch))


def test_runs_are_deterministic(tmp_path: Path, trained: RunFn) -> None:
    again = run(
        make_spec(
            CAUSAL, backend="pytorch", per_device_train_batch_size=4, gradient_accumulation_steps=4
        ),
        tmp_path,
    )
    first, _ = trained("causal-lm", "pytorch", 4, 4)
    assert max_abs_diff(first, final_weights(tmp_path)) == 0.0
    assert again.status == "completed"
