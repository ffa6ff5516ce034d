"""The preview (``trainer_core.preview``) shows what the trainer trains: its per-row trained
counts sum to the epoch's ``train_items`` (what the loss is divided by) on the same rows, a row
cut away by max_seq_length is reported as such, a marker-free template is reported and counts the
same as its marked twin, and an injected empty think block is reported. A marker-free job and a
marked job on the same data train the same weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_core.chat_families import FAMILIES
from tests.trainer_core.helpers import (
    CHAT,
    final_weights,
    initial_weights,
    make_spec,
    max_abs_diff,
    prompt_completion_file,
    run,
    tolerance,
)
from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.preview import FALLBACK, NOTHING, REASONING, preview
from trainer_core.spec.chat import CHATML_TEMPLATE
from trainer_core.spec.job import JobSpec

ROWS = 9
UNMARKED = CHATML_TEMPLATE.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")
LONG = [{"role": "user", "content": "1+1? " * 40}, {"role": "assistant", "content": "2"}]


@pytest.fixture(scope="module")
def chats(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Conversations with weight-0 turns, and a last one whose answer lies past 64 tokens."""
    path = tmp_path_factory.mktemp("chats") / "chats.jsonl"
    rows: list[Any] = chat_arithmetic("train")["messages"][: ROWS - 1]
    lines = [json.dumps({"messages": m}) for m in [*rows, LONG]]
    path.write_text("\n".join(lines) + "\n")
    return path


def _spec(data: Path, **extra: Any) -> JobSpec:
    fields = {"max_seq_length": 64, "num_train_epochs": 1, "validation_split_percentage": 0,
              "max_train_samples": None} | extra  # fmt: skip
    return make_spec({**CHAT, "dataset": str(data)}, **fields)


def test_counts_are_the_trainers(chats: Path, tmp_path: Path) -> None:
    spec = _spec(chats)
    shown = preview(spec, rows=ROWS)["rows"]
    assert len(shown) == ROWS
    for row in shown:
        assert row["trained"] == sum(t["trained"] for t in row["tokens"]) <= row["total"] <= 64
        assert not row["tokens"][0]["trained"]  # the first token predicts nothing
    assert NOTHING in shown[-1]["warnings"] and "cut away" in " ".join(shown[-1]["warnings"])
    assert all(not row["warnings"] for row in shown[:-1])
    trained = "".join(t["text"] for t in shown[0]["tokens"] if t["trained"])
    assert trained.endswith("<|im_end|>") and "<|im_start|>" not in trained
    result = run(spec, tmp_path)
    epoch = next(r for r in result.metrics if "train_items" in r)
    assert epoch["train_items"] == sum(row["trained"] for row in shown) > 0


def test_fallback_reported_and_counted_alike(chats: Path) -> None:
    marked = preview(_spec(chats), rows=3)["rows"]
    fallback = preview(_spec(chats, chat_template=UNMARKED), rows=3)["rows"]
    assert [r["tokens"] for r in fallback] == [r["tokens"] for r in marked]
    assert all(FALLBACK in r["warnings"] for r in fallback)


def test_empty_think_block_warned_and_left_out_on_request(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"messages": [*LONG[:1], {"role": "assistant", "content": "2"}]}))
    qwen3 = next(f for f in FAMILIES if f.name == "qwen3").unmarked
    kept = preview(_spec(path, chat_template=qwen3, max_seq_length=256), rows=1)["rows"][0]
    cut = preview(_spec(path, chat_template=qwen3, max_seq_length=256,
                        train_empty_reasoning=False), rows=1)["rows"][0]  # fmt: skip
    assert REASONING in kept["warnings"] and REASONING not in cut["warnings"]
    assert "".join(t["text"] for t in cut["tokens"] if t["trained"]) == "2<|im_end|>"
    assert kept["trained"] > cut["trained"]


def test_prompt_completion_counts(tmp_path: Path) -> None:
    data = prompt_completion_file(tmp_path, rows=4)
    spec = _spec(data)
    shown = preview(spec, rows=4)["rows"]
    result = run(spec, tmp_path / "out")
    epoch = next(r for r in result.metrics if "train_items" in r)
    assert epoch["train_items"] == sum(row["trained"] for row in shown)
    assert shown[0]["tokens"][-1]["trained"] and shown[0]["tokens"][-1]["text"] == "<|im_end|>"


def test_marker_free_and_marked_jobs_train_the_same_weights(chats: Path, tmp_path: Path) -> None:
    marked = _spec(chats, chat_template="chatml", num_train_epochs=2)
    runs = {}
    for name, spec in (("marked", marked), ("free", _spec(chats, chat_template=UNMARKED,
                                                           num_train_epochs=2))):  # fmt: skip
        assert run(spec, tmp_path / name).status == "completed"
        runs[name] = final_weights(tmp_path / name)
    bound = tolerance(initial_weights(marked), runs["marked"])
    assert bound > 1e-6
    assert max_abs_diff(runs["free"], runs["marked"]) <= bound
