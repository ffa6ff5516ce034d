"""The equivalence check is sensitive: the two classic accumulation loops fail it on the causal-LM
case, where micro-batches hold different numbers of tokens and the last window is partial."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
import torch

from tests.trainer_core.helpers import (
    CAUSAL,
    Weights,
    final_weights,
    initial_weights,
    make_spec,
    max_abs_diff,
    run,
    tolerance,
)
from trainer_core.data.load import load_job_data
from trainer_core.data.loader import EpochLoader, EpochPlan
from trainer_core.data.plan import optimizer_steps_per_epoch
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.model.optim import build_optimizer, build_scheduler
from trainer_core.spec.job import JobSpec

Mode = Literal["mean_over_k", "drop_partial_window"]


def classic_loop(spec: JobSpec, mode: Mode) -> Weights:
    """What most tutorials write: the model's per-micro-batch mean loss divided by K.
    ``mean_over_k`` steps at every window end (partial ones too); ``drop_partial_window`` steps
    only after K micro-batches and throws away the gradients of an epoch's last partial window."""
    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    model = load_model(spec, tokenizer, data.label_names)
    b, k = spec.per_device_train_batch_size, spec.gradient_accumulation_steps
    plan = EpochPlan(
        data.train, batch_size=b, accumulation=k, seed=spec.seed, pad_id=int(tokenizer.pad_token_id)
    )
    loader = EpochLoader(plan)
    optimizer = build_optimizer(model, spec)
    scheduler = build_scheduler(
        optimizer, spec, optimizer_steps_per_epoch(len(data.train), b, k) * spec.num_train_epochs
    )
    model.train()
    for epoch in range(spec.num_train_epochs):
        loader.set_epoch(epoch)
        optimizer.zero_grad()
        for i, batch in enumerate(loader):
            out = model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                labels=batch["labels"],
            )
            (out.loss / k).backward()
            step = batch["last_in_window"] if mode == "mean_over_k" else (i + 1) % k == 0
            if step:
                torch.nn.utils.clip_grad_norm_(model.parameters(), spec.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Weights, float]:
    spec = make_spec(CAUSAL, per_device_train_batch_size=16, gradient_accumulation_steps=1)
    out: Path = tmp_path_factory.mktemp("large-batch")
    run(spec, out)
    weights = final_weights(out)
    return weights, tolerance(initial_weights(spec), weights)


@pytest.mark.parametrize("mode", ["mean_over_k", "drop_partial_window"])
def test_classic_loops_fail_the_equivalence_check(
    reference: tuple[Weights, float], mode: Mode
) -> None:
    large_batch, bound = reference
    spec = make_spec(CAUSAL, per_device_train_batch_size=4, gradient_accumulation_steps=4)
    buggy = classic_loop(spec, mode)
    assert max_abs_diff(buggy, large_batch) > 10 * bound


def test_classic_loop_is_exact_without_accumulation(reference: tuple[Weights, float]) -> None:
    """Sanity check of the control itself: with K = 1 and b·K rows it is the reference loop."""
    large_batch, bound = reference
    spec = make_spec(CAUSAL, per_device_train_batch_size=16, gradient_accumulation_steps=1)
    assert max_abs_diff(classic_loop(spec, "mean_over_k"), large_batch) <= bound
