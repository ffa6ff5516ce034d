"""What a preference pair trains: its prompt rendered with the chat template and the generation
prompt (untrained), then each completion's content and end of turn (trained); a prompt string
as written, a completion plus the EOS. Both row shapes read alike; a bad row names its row and
field; data that is not pairs is refused for dpo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainer_core.data.load import load_job_data
from trainer_core.data.splits import PreferenceSplit
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.errors import DatasetError
from trainer_core.spec.job import JobSpec

USER = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "what is 2 plus 2?"},
]
OPENAI = {"input": {"messages": USER}, "preferred_output": [{"role": "assistant", "content": "4."}],
          "non_preferred_output": [{"role": "assistant", "content": "5, I think."}]}  # fmt: skip
TRL = {"prompt": USER, "chosen": [{"role": "assistant", "content": "4."}],
       "rejected": [{"role": "assistant", "content": "5, I think."}]}  # fmt: skip


def load(tmp_path: Path, rows: list[Any], **changes: Any) -> tuple[Any, Any]:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = JobSpec(model="builtin:tiny-chat", dataset=str(path), task="causal-lm", method="dpo",
                   validation_split_percentage=0, **changes)  # fmt: skip
    tokenizer = load_tokenizer(spec)
    split = load_job_data(spec, tokenizer).train
    assert isinstance(split, PreferenceSplit) and split.loss_mask is not None
    return split, tokenizer


def parts(tokenizer: Any, ids: Any, mask: Any) -> tuple[str, str]:
    """(untrained text, trained text) of one sequence."""
    untrained = [int(t) for t, m in zip(ids, mask, strict=True) if not m]
    trained = [int(t) for t, m in zip(ids, mask, strict=True) if m]
    return tokenizer.decode(untrained), tokenizer.decode(trained)


@pytest.mark.parametrize("row", [OPENAI, TRL], ids=["openai", "trl"])
def test_a_pair_trains_its_completions_and_their_end_of_turn(tmp_path: Path, row: Any) -> None:
    split, tokenizer = load(tmp_path, [row])
    prompt = tokenizer.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    # The completion ends at its end-of-turn token, trained; no separator follows it
    # (docs/what-is-trained.md).
    assert parts(tokenizer, split.input_ids[0], split.loss_mask[0]) == (prompt, "4.<|im_end|>")
    assert parts(tokenizer, split.rejected_ids[0], split.rejected_mask[0]) == (
        prompt, "5, I think.<|im_end|>")  # fmt: skip
    assert list(split.items) == [1]  # the pair is the unit
    assert split.chosen_items[0] == int(split.loss_mask[0][1:].sum())


def test_a_prompt_string_is_used_as_written(tmp_path: Path) -> None:
    split, tokenizer = load(tmp_path, [{"prompt": "Q: 2+2?\nA:", "chosen": " 4", "rejected": " 5"}])
    assert parts(tokenizer, split.input_ids[0], split.loss_mask[0]) == (
        "Q: 2+2?\nA:", " 4" + tokenizer.eos_token)  # fmt: skip


TOOLS_TEMPLATE = (
    "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}"
    "\n{% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>\n{% endgeneration %}"
    "{% else %}{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_tools_reach_the_template(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    split, tokenizer = load(tmp_path, [{**OPENAI, "input": {"messages": USER, "tools": tools}}],
                            chat_template=TOOLS_TEMPLATE)  # fmt: skip
    untrained, _ = parts(tokenizer, split.input_ids[0], split.loss_mask[0])
    assert '"add"' in untrained


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({**OPENAI, "preferred_output": [{"role": "user", "content": "4."}]},
         "dataset: row 2: preferred_output[0].role: must be 'assistant' (got 'user')"),
        ({**TRL, "rejected": []}, "dataset: row 2: rejected: one assistant message"),
    ],
)  # fmt: skip
def test_a_bad_row_is_named(tmp_path: Path, row: Any, message: str) -> None:
    with pytest.raises(DatasetError) as caught:
        load(tmp_path, [OPENAI if "input" in row else TRL, row])
    assert caught.value.param == "dataset" and str(caught.value).startswith(message)


def test_dpo_refuses_data_that_is_not_pairs(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as caught:
        load(tmp_path, [{"messages": USER}])
    assert caught.value.param == "method" and "preference rows" in str(caught.value)


def test_an_overlong_pair_is_refused_or_cut(tmp_path: Path) -> None:
    long = {**TRL, "rejected": [{"role": "assistant", "content": "5 " * 80}]}
    with pytest.raises(DatasetError) as caught:
        load(tmp_path, [TRL, long], max_seq_length=64, overlong_rows="refuse")
    assert str(caught.value).startswith("dataset: row 2: it is ")
    split, _ = load(tmp_path, [TRL, long], max_seq_length=64)
    assert len(split) == 2 and len(split.rejected_ids[1]) == 64
