"""``builtin:preference-arithmetic``: the chat-arithmetic prompts with the right answer preferred
and a wrong one not, the same rows on every build, in the shape the spec and the loader read."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.builtin.corpus import BUILDERS
from trainer_core.builtin.preference_corpus import preference_arithmetic, wrong_answer
from trainer_core.spec.fields import BUILTIN_DATASET_FORMATS, BUILTIN_DATASETS
from trainer_core.spec.job import JobSpec

NAME = "builtin:preference-arithmetic"
_SUM = re.compile(r"^(\d+) (plus|minus) (\d+) is (\d+)\.$")


def _right(answer: str) -> bool:
    match = _SUM.match(answer)
    assert match is not None, answer
    a, word, b, result = match.groups()
    return int(a) + (int(b) if word == "plus" else -int(b)) == int(result)


@pytest.mark.parametrize("split", ["train", "validation"])
def test_the_right_answer_is_preferred_and_a_wrong_one_is_not(split: str) -> None:
    rows = preference_arithmetic(split)
    conversations: list[Any] = chat_arithmetic(split)["messages"]
    assert len(rows["prompt"]) == len(conversations) > 0
    for prompt, chosen, rejected, whole in zip(
        rows["prompt"], rows["chosen"], rows["rejected"], conversations, strict=True
    ):
        assert isinstance(prompt, list) and isinstance(chosen, list) and isinstance(rejected, list)
        # The prompt is the conversation before its last answer, without weights.
        assert prompt == [{"role": m["role"], "content": m["content"]} for m in whole[:-1]]
        assert prompt[-1]["role"] == "user"
        assert chosen == [whole[-1] | {}] and "weight" not in whole[-1]
        assert [m["role"] for m in rejected] == ["assistant"]
        assert _right(chosen[0]["content"]) and not _right(rejected[0]["content"])


def test_the_rows_are_the_same_on_every_build() -> None:
    built = preference_arithmetic.__wrapped__("train")  # not the cached copy
    assert built == preference_arithmetic("train")
    assert built != preference_arithmetic.__wrapped__("validation")


def test_a_wrong_answer_is_another_number_in_range() -> None:
    rng = random.Random(0)
    for right, top in ((7, 40), (55, 65)):
        seen = {int(wrong_answer(f"3 plus 4 is {right}.", rng)[12:-1]) for _ in range(2000)}
        assert seen == set(range(top + 1)) - {right}
    with pytest.raises(ValueError, match="not a chat-arithmetic answer"):
        wrong_answer("seven.", rng)


def test_it_is_a_registered_preference_builtin() -> None:
    assert BUILDERS[NAME] is preference_arithmetic
    assert BUILTIN_DATASETS[NAME] is False  # no labels
    assert BUILTIN_DATASET_FORMATS[NAME] == "preference"
    spec = JobSpec(model="builtin:tiny-chat", dataset=NAME, task="causal-lm", method="dpo")
    assert spec.dataset == NAME


def test_every_row_passes_the_upload_check() -> None:
    from trainer_core.spec.dpo import check_preference_row

    rows = preference_arithmetic("validation")
    for line, values in enumerate(zip(*rows.values(), strict=True), start=1):
        row = dict(zip(rows, values, strict=True))
        assert check_preference_row(row, line) == []
