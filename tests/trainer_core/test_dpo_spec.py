"""The DPO part of the job spec and the preference row checks (torch-free): both shapes of a row
read as one pair, every problem names its line and field, and what cannot be trained exactly is
refused at the spec."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trainer_core.spec.dpo import (
    PreferencePair,
    check_preference_row,
    normalise_preference_row,
)
from trainer_core.spec.job import JobSpec

DPO = {"model": "builtin:tiny-chat", "dataset": "pairs.jsonl", "task": "causal-lm",
       "method": "dpo"}  # fmt: skip
USER = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]


def openai_row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "input": {"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}]},
        "preferred_output": [{"role": "assistant", "content": "4"}],
        "non_preferred_output": [{"role": "assistant", "content": "5"}],
    }
    return row | changes


def test_the_defaults_and_the_formats_found() -> None:
    spec = JobSpec(**DPO)
    assert (spec.dpo_beta, spec.dpo_loss, spec.rpo_alpha, spec.reference_logprobs) == (
        0.1, "sigmoid", None, "cached")  # fmt: skip
    assert spec.format_for(["input", "preferred_output", "non_preferred_output"]) == "preference"
    assert spec.format_for(["prompt", "chosen", "rejected", "id"]) == "preference"
    assert spec.format_for(["prompt", "completion"]) == "prompt-completion"
    renamed = JobSpec(**DPO, chosen_column="good", rejected_column="bad")
    assert renamed.format_for(["prompt", "good", "bad"]) == "preference"
    assert renamed.missing_columns("preference", ["prompt", "good"]) == [("rejected_column", "bad")]
    assert renamed.missing_columns("preference", ["input", "preferred_output",
                                                  "non_preferred_output"]) == []  # fmt: skip
    assert JobSpec(model="builtin:tiny-bert", dataset="builtin:sentiment").method == "sft"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"dpo_loss": "aot"}, "dpo_loss", "sorts the log-ratios across the pairs"),
        ({"dpo_loss": "kto_pair"}, "dpo_loss", "statistic of the micro-batch"),
        ({"dpo_loss": "simpo"}, "dpo_loss", "sigmoid"),
        ({"dpo_beta": 0}, "dpo_beta", "greater than 0"),
        ({"rpo_alpha": -1}, "rpo_alpha", "greater than or equal to 0"),
        ({"dataset_format": "messages"}, "method", "dpo trains preference data"),
        ({"method": "sft", "dataset_format": "preference"}, "method", "method 'dpo'"),
        ({"task": "sequence-classification", "model": "builtin:tiny-gpt2"}, "method", "causal-lm"),
        ({"reference_logprobs": "nightly"}, "reference_logprobs", "cached"),
        ({"chosen_column": "a/b"}, "chosen_column", "column names"),
    ],
)
def test_what_cannot_train_is_refused_naming_the_field(
    changes: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec(**(DPO | changes))
    errors = caught.value.errors()
    assert [e["loc"][0] for e in errors] == [field]
    assert words in errors[0]["msg"]


def test_an_openai_row_reads_as_a_pair() -> None:
    pair = normalise_preference_row(openai_row())
    assert pair == PreferencePair(USER, None, "4", "5", openai_row()["input"]["tools"])
    assert check_preference_row(openai_row(), 1) == []


@pytest.mark.parametrize(
    ("row", "pair"),
    [
        ({"prompt": "Q: 2+2?\nA:", "chosen": " 4", "rejected": " 5"},
         PreferencePair(None, "Q: 2+2?\nA:", " 4", " 5")),
        ({"prompt": USER, "chosen": [{"role": "assistant", "content": "4"}],
          "rejected": [{"role": "assistant", "content": "5"}]},
         PreferencePair(USER, None, "4", "5")),
    ],
)  # fmt: skip
def test_a_trl_row_reads_as_a_pair(row: dict[str, Any], pair: PreferencePair) -> None:
    assert normalise_preference_row(row) == pair


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (openai_row(preferred_output=[{"role": "user", "content": "4"}]),
         "line 3: preferred_output[0].role: must be 'assistant' (got 'user')"),
        (openai_row(non_preferred_output=[{"role": "assistant", "content": "5"}] * 2),
         "line 3: non_preferred_output: one assistant message (a list of one), or a string"),
        (openai_row(input={"messages": []}), "line 3: input.messages: a non-empty list of messages"),
        (openai_row(input={"messages": [{"role": "robot", "content": "x"}]}),
         "line 3: input.messages[0].role: one of system, developer, user, assistant, tool "
         "(got 'robot')"),
        (openai_row(input={"messages": USER, "tools": "f"}), "line 3: input.tools: a list of tool "
         "objects"),
        (openai_row(preferred_output=[{"role": "assistant", "content": ""}]),
         "line 3: preferred_output[0].content: a non-empty string"),
        ({"prompt": "Q", "chosen": 4, "rejected": "5"},
         "line 3: chosen: one assistant message (a list of one), or a string"),
        ({"prompt": "Q", "chosen": [{"role": "assistant", "content": "4"}], "rejected": "5"},
         "line 3: prompt: a string with string completions, or messages with messages"),
        ({"prompt": "Q", "chosen": "4"}, "line 3: rejected: one assistant message (a list of "
         "one), or a string"),
        ([1, 2], "line 3: a JSON object per line"),
    ],
)  # fmt: skip
def test_each_problem_names_its_line_and_field(row: Any, problem: str) -> None:
    assert check_preference_row(row, 3)[0] == problem
    with pytest.raises(ValueError) as caught:
        normalise_preference_row(row)
    assert str(caught.value) == problem.removeprefix("line 3: ")


def test_renamed_columns_are_read() -> None:
    row = {"q": "Q", "good": "4", "bad": "5"}
    columns = {"prompt_column": "q", "chosen_column": "good", "rejected_column": "bad"}
    assert check_preference_row(row, 1, **columns) == []
    assert normalise_preference_row(row, **columns) == PreferencePair(None, "Q", "4", "5")
    assert JobSpec(**DPO, prompt_column="q", chosen_column="good",
                   rejected_column="bad").columns == columns  # fmt: skip
