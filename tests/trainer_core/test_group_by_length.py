"""Window-local length grouping: each window keeps exactly its rows (so N_W, and with it every
update, is unchanged; the training equivalence is in test_chat_equivalence), its rows come
longest first, and the micro-batches pad less. Step records report the padding fraction."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.trainer_core.helpers import CHAT, make_spec
from tests.trainer_core.test_step_metrics import steps_of
from trainer_core.accumulation import collate
from trainer_core.data.loader import EpochPlan
from trainer_core.data.plan import EpochIndex, epoch_permutation, group_windows_by_length
from trainer_core.data.splits import TokenizedSplit
from trainer_core.data.tokenized import ArrowRows, row_lengths


def test_each_window_keeps_its_rows_longest_first() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200, size=103)
    order = epoch_permutation(103, seed=3, epoch=1)
    items = rng.integers(0, 50, size=103)
    plain = EpochIndex(order, items, batch_size=4, accumulation=3)
    grouped = EpochIndex(order, items, batch_size=4, accumulation=3, lengths=lengths)
    assert np.array_equal(plain.window_items, grouped.window_items)
    for start in range(0, 103, 12):
        window = grouped.order[start : start + 12]
        assert sorted(window) == sorted(order[start : start + 12])
        assert list(lengths[window]) == sorted(lengths[window], reverse=True)
    assert [m.n_window_items for m in grouped] == [m.n_window_items for m in plain]
    assert [m.last_in_window for m in grouped] == [m.last_in_window for m in plain]
    # Equal lengths keep the permutation's order: grouping is stable.
    assert np.array_equal(group_windows_by_length(order, np.ones(103, np.int64), 12), order)


def test_grouping_pads_less() -> None:
    rng = np.random.default_rng(1)
    rows = [list(range(int(n))) for n in rng.integers(2, 120, size=256)]
    split = TokenizedSplit(input_ids=rows, labels=None, items=[len(r) - 1 for r in rows])
    padded = {}
    for group in (False, True):
        plan = EpochPlan(split, batch_size=4, accumulation=8, seed=5, pad_id=0,
                         group_by_length=group)  # fmt: skip
        batches = [collate(split.input_ids, None, m, 0) for m in plan.full_plan(0)]
        assert sum(b["n_tokens"] for b in batches) == sum(len(r) for r in rows)
        padded[group] = 1 - sum(b["n_tokens"] for b in batches) / sum(
            b["input_ids"].numel() for b in batches
        )
    print(f"padding fraction: {padded[False]:.3f} plain, {padded[True]:.3f} grouped")
    assert padded[True] < padded[False] / 2


def test_arrow_row_lengths_come_from_the_offsets() -> None:
    import pyarrow as pa

    column = pa.chunked_array([pa.array([[1, 2], [3]]), pa.array([[4, 5, 6], []])])
    assert list(row_lengths(ArrowRows(column))) == [2, 1, 3, 0]
    assert list(row_lengths([[1], [1, 2]])) == [1, 2]


def test_step_records_report_the_padding_fraction(tmp_path: Path) -> None:
    fractions = {}
    for group in (False, True):
        spec = make_spec(CHAT, per_device_train_batch_size=2, gradient_accumulation_steps=8,
                         max_seq_length=64, logging_steps=1, num_train_epochs=1,
                         max_train_samples=64, group_by_length=group)  # fmt: skip
        records = steps_of(spec, tmp_path / str(group)).steps
        assert records and all(0 <= r["padding_fraction"] < 1 for r in records)
        fractions[group] = sum(r["padding_fraction"] for r in records) / len(records)
    assert fractions[True] < fractions[False], fractions
