"""What a chat or prompt-completion row trains, against references built without the core:
transformers' ``apply_chat_template(..., return_assistant_tokens_mask=True)`` with a template that
honours ``weight`` itself, and, for prompt-completion, the prompt's own tokenization. A template
without generation markers gives the same tokens; the negative control (training every turn) is
told apart; truncation that leaves a row nothing to train drops it, counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_core.helpers import CHAT, make_spec, prompt_completion_file
from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.data.load import load_job_data
from trainer_core.data.splits import TokenizedSplit
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.chat import CHATML_TEMPLATE
from trainer_core.spec.errors import DatasetError

ROWS = 60
# The reference: ChatML whose generation markers skip assistant messages of weight 0, so that
# transformers' own mask is the expected one (the core's template leaves weights to the core).
WEIGHTED = CHATML_TEMPLATE.replace(
    "{%- if message['role'] == 'assistant' -%}",
    "{%- if message['role'] == 'assistant' and message.get('weight', 1) != 0 -%}",
)
UNMARKED = CHATML_TEMPLATE.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")


def _rows(split: TokenizedSplit) -> list[tuple[list[int], list[int]]]:
    assert split.loss_mask is not None
    return [
        ([int(t) for t in split.input_ids[i]], [int(m) for m in split.loss_mask[i]])
        for i in range(len(split))
    ]


def _core(**spec: Any) -> TokenizedSplit:
    job = make_spec(CHAT, max_train_samples=ROWS, **spec)
    return load_job_data(job, load_tokenizer(job)).train


def _reference(conversation: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    tokenizer = load_tokenizer(make_spec(CHAT))
    out = tokenizer.apply_chat_template(conversation, chat_template=WEIGHTED, tokenize=True,
                                        return_dict=True, return_assistant_tokens_mask=True)  # fmt: skip
    return list(out["input_ids"]), list(out["assistant_masks"])


@pytest.fixture(scope="module")
def expected() -> list[tuple[list[int], list[int]]]:
    conversations = chat_arithmetic("train")["messages"][:ROWS]
    assert any(m.get("weight") == 0 for c in conversations for m in c)  # type: ignore[union-attr]
    return [_reference(c) for c in conversations]  # type: ignore[arg-type]


def test_assistant_tokens_are_what_transformers_marks(expected: list[Any]) -> None:
    """Content and end of turn of each assistant message of weight 1; nothing else."""
    rows = _rows(_core())
    assert rows == expected
    split = _core()
    for (_, mask), items in zip(rows, split.items, strict=True):
        assert items == sum(mask[1:]) > 0  # counted after the shift


def test_a_template_without_markers_trains_the_same_tokens(expected: list[Any]) -> None:
    assert _rows(_core(chat_template=UNMARKED)) == expected


def test_training_every_turn_is_told_apart(expected: list[Any]) -> None:
    """Negative control: with assistant_only_loss off (user turns trained) the mask differs."""
    every = _rows(_core(assistant_only_loss=False))
    assert [ids for ids, _ in every] == [ids for ids, _ in expected]
    assert all(sum(m) == len(m) for _, m in every)
    assert every != expected


def test_prompt_completion_trains_the_completion_and_eos(tmp_path: Path) -> None:
    data = prompt_completion_file(tmp_path, rows=ROWS)
    job = make_spec(CHAT, dataset=str(data), max_train_samples=ROWS, validation_split_percentage=10)
    tokenizer = load_tokenizer(job)
    split = load_job_data(job, tokenizer).train
    assert split.loss_mask is not None
    by_text = {}
    for line in data.read_text().splitlines():
        row = json.loads(line)
        full = tokenizer(row["prompt"] + row["completion"] + tokenizer.eos_token,
                         add_special_tokens=False)["input_ids"]  # fmt: skip
        prompt = len(tokenizer(row["prompt"], add_special_tokens=False)["input_ids"])
        by_text[tuple(full)] = [0] * prompt + [1] * (len(full) - prompt)
    for i in range(len(split)):
        ids = tuple(int(t) for t in split.input_ids[i])
        assert [int(m) for m in split.loss_mask[i]] == by_text[ids]
        assert ids[-1] == tokenizer.eos_token_id


def test_rows_truncated_to_nothing_are_counted_and_left_out() -> None:
    """At 16 tokens a conversation that opens with a system prompt ends before its answer."""
    job = make_spec(CHAT, max_train_samples=ROWS, max_seq_length=16)
    data = load_job_data(job, load_tokenizer(job))
    assert data.dropped["train"] > 0 and len(data.train) == ROWS - data.dropped["train"]
    assert all(items > 0 for items in data.train.items)
    with pytest.raises(DatasetError, match="no usable rows") as caught:
        tiny = make_spec(CHAT, max_train_samples=ROWS, max_seq_length=4)
        load_job_data(tiny, load_tokenizer(tiny))
    assert caught.value.param == "max_seq_length"
