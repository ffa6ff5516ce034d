"""Nothing a chat job trains on is cut or set aside without a word: what truncation cuts is
counted against transformers' own tokens and masks (``apply_chat_template``); with
``overlong_rows: "refuse"`` the first row longer than ``max_seq_length`` fails the job, named;
``validation_split_percentage: 0`` trains on every row and evaluates nothing, and a hold-out
says how many rows it took."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_core.helpers import CHAT, make_spec, run
from tests.trainer_core.test_chat_masks import WEIGHTED
from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.data.load import load_job_data
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.errors import DatasetError

ROWS = 40
LIMIT = 24  # tokens: most conversations are longer, some end before their first answer


@pytest.fixture(scope="module")
def whole() -> list[tuple[int, list[int]]]:
    """(tokens, trained mask) of each conversation, untruncated, as transformers renders it."""
    tokenizer = load_tokenizer(make_spec(CHAT))
    found = []
    for conversation in chat_arithmetic("train")["messages"][:ROWS]:
        out = tokenizer.apply_chat_template(conversation, chat_template=WEIGHTED, tokenize=True,
                                            return_dict=True, return_assistant_tokens_mask=True)  # fmt: skip
        found.append((len(out["input_ids"]), list(out["assistant_masks"])))
    return found


def test_truncation_counts_the_rows_and_tokens_it_cuts(
    tmp_path: Path, whole: list[tuple[int, list[int]]]
) -> None:
    kept = [(n, mask) for n, mask in whole if sum(mask[1:LIMIT]) > 0]
    cut = [(n, mask) for n, mask in kept if n > LIMIT]
    assert cut and len(kept) < len(whole)  # the limit cuts rows, and leaves some nothing
    spec = make_spec(CHAT, max_train_samples=ROWS, max_seq_length=LIMIT, num_train_epochs=1)
    data = load_job_data(spec, load_tokenizer(spec))
    assert data.truncated["train"] == {
        "rows": len(cut),
        "tokens": sum(n - LIMIT for n, _ in cut),
        "trained_tokens": sum(sum(mask[LIMIT:]) for _, mask in cut),
    }
    assert data.dropped["train"] == len(whole) - len(kept)
    # The warning event the worker turns it into.
    result = run(spec, tmp_path / "cut")
    said = f"cut {len(cut)} training rows: {sum(n - LIMIT for n, _ in cut)} tokens dropped"
    assert any(said in w for w in result.summary["warnings"])


def test_untruncated_rows_count_nothing_cut(whole: list[tuple[int, list[int]]]) -> None:
    spec = make_spec(CHAT, max_train_samples=ROWS, max_seq_length=max(n for n, _ in whole))
    data = load_job_data(spec, load_tokenizer(spec))
    assert data.truncated["train"] == {"rows": 0, "tokens": 0, "trained_tokens": 0}
    assert len(data.train) == ROWS


def test_refusing_names_the_first_longer_row(whole: list[tuple[int, list[int]]]) -> None:
    first = next(i for i, (n, _) in enumerate(whole) if n > LIMIT)
    spec = make_spec(CHAT, max_train_samples=ROWS, max_seq_length=LIMIT, overlong_rows="refuse")
    with pytest.raises(DatasetError) as caught:
        load_job_data(spec, load_tokenizer(spec))
    assert caught.value.param == "dataset"
    assert caught.value.message.startswith(
        f"dataset: row {first + 1} is {whole[first][0]} tokens long; this job trains on at "
        f"most {LIMIT} tokens a row"
    )


def test_truncated_to_nothing_names_max_seq_length() -> None:
    spec = make_spec(CHAT, max_train_samples=ROWS, max_seq_length=4)
    with pytest.raises(DatasetError, match="no usable rows") as caught:
        load_job_data(spec, load_tokenizer(spec))
    assert caught.value.param == "max_seq_length"


def _chat_file(folder: Path, rows: int) -> Path:
    path = folder / "chat.jsonl"
    conversations: list[Any] = chat_arithmetic("train")["messages"][:rows]
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in conversations))
    return path


def test_no_hold_out_trains_every_row_and_evaluates_nothing(tmp_path: Path) -> None:
    path = _chat_file(tmp_path, 20)
    every = make_spec(CHAT, dataset=str(path), validation_split_percentage=0,
                      num_train_epochs=1, max_seq_length=256)  # fmt: skip
    result = run(every, tmp_path / "every")
    assert result.status == "completed"
    assert (result.summary["num_train_samples"], result.summary["num_eval_samples"]) == (20, 0)
    assert "eval_loss" not in result.metrics[-1] and result.metrics[-1]["train_loss"] > 0
    assert not any("held out" in w for w in result.summary["warnings"])
    held = run(every.model_copy(update={"validation_split_percentage": 10}), tmp_path / "held")
    assert held.summary["num_train_samples"] == 18
    assert any(
        w.startswith("2 training rows (10 %) are held out") for w in held.summary["warnings"]
    )


def test_no_hold_out_refuses_to_select_a_best_model(tmp_path: Path) -> None:
    spec = make_spec(CHAT, dataset=str(_chat_file(tmp_path, 8)), validation_split_percentage=0,
                     load_best_model_at_end=True)  # fmt: skip
    with pytest.raises(DatasetError) as caught:
        load_job_data(spec, load_tokenizer(spec))
    assert caught.value.param == "validation_split_percentage"
