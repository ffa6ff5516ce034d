"""A dpo job's trained tokens: each epoch record's ``train_tokens`` is the number of tokens that
carry loss after the causal shift in both completions of every pair the epoch trained (the same
definition as a chat job's trained tokens), counted here apart from the core, from the tokenized
pairs' masks. It survives a preemption mid-epoch (the partial epoch's count is checkpointed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.trainer_core.dpo_pairs import pairs_file
from tests.trainer_core.helpers import run
from trainer_core.data.load import load_job_data
from trainer_core.data.splits import PreferenceSplit
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.callbacks import StopRequest
from trainer_core.spec.job import JobSpec

# 11 pairs at b = 2, K = 2: micro-batches of 2, 2, 2, 2, 2 and 1 pairs, windows of 4, 4 and 3.
RUN: dict[str, Any] = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2,
                       "num_train_epochs": 2, "validation_split_percentage": 0,
                       "max_seq_length": 128, "learning_rate": 1e-3, "seed": 3}  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pairs_file(tmp_path_factory.mktemp("pairs"))


def dpo_spec(data: Path, **changes: Any) -> JobSpec:
    return JobSpec(model="builtin:tiny-chat", dataset=str(data), task="causal-lm", method="dpo",
                   **(RUN | changes))  # fmt: skip


def tokens_of_every_pair(spec: JobSpec) -> int:
    """Σ over the pairs of both completions' trained tokens after the shift (a sequence's first
    token predicts nothing), read from the tokenized masks."""
    split = load_job_data(spec, load_tokenizer(spec)).train
    assert isinstance(split, PreferenceSplit) and split.loss_mask is not None
    masks = [*split.loss_mask, *split.rejected_mask]
    assert len(masks) == 2 * len(split) == 22
    return sum(int(np.asarray(mask)[1:].sum()) for mask in masks)


@pytest.mark.parametrize("backend", ["pytorch", "trainer"])
def test_each_epoch_records_the_trained_tokens_of_its_pairs(
    data: Path, tmp_path: Path, backend: str
) -> None:
    spec = dpo_spec(data, backend=backend)
    expected = tokens_of_every_pair(spec)
    epochs = run(spec, tmp_path).metrics
    assert [e["train_items"] for e in epochs] == [11, 11]  # the loss's unit: pairs
    assert [e["train_tokens"] for e in epochs] == [expected, expected]
    assert expected > 2 * 11 * 3  # every completion trains at least 3 tokens


def test_the_count_survives_a_preemption_mid_epoch(data: Path, tmp_path: Path) -> None:
    """Preempted after the first window of epoch 2 (6 micro-batches an epoch, 2 a window): the
    resumed epoch counts the pairs trained before the preemption too."""
    spec = dpo_spec(data)
    calls = 0

    def preempt_in_epoch_2() -> StopRequest | None:
        nonlocal calls
        calls += 1
        return "preempt" if calls >= 6 + 2 else None

    first = run(spec, tmp_path, should_stop=preempt_in_epoch_2)
    assert first.status == "preempted" and len(first.metrics) == 1
    second = run(spec, tmp_path)
    assert second.status == "completed"
    expected = tokens_of_every_pair(spec)
    assert [e["train_tokens"] for e in second.metrics] == [expected, expected]
