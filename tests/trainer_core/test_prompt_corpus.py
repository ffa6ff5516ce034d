"""``builtin:arithmetic-prompts``: each chat-arithmetic conversation cut before its last answer,
with that answer (and its number) as the grader's item, the splits chat-arithmetic's; a GRPO
job's prompts read from it (train and validation), and the spec takes it for grpo only."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.builtin.prompt_corpus import arithmetic_prompts
from trainer_core.grpo.prompts import load_prompts
from trainer_core.spec.job import JobSpec
from trainer_core.spec.prompts import prompt_problems

GRADER = {"type": "string_check", "name": "answer", "operation": "eq",
          "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"}  # fmt: skip


def job(**changes: Any) -> dict[str, Any]:
    return {"model": "builtin:tiny-chat", "dataset": "builtin:arithmetic-prompts",
            "task": "causal-lm", "method": "grpo", "per_device_train_batch_size": 4,
            "grpo": {"group_size": 4, "grader": GRADER}} | changes  # fmt: skip


@pytest.mark.parametrize("split", ["train", "validation"])
def test_each_row_is_its_conversation_cut_before_the_last_answer(split: str) -> None:
    rows, conversations = arithmetic_prompts(split), chat_arithmetic(split)["messages"]
    assert len(rows["messages"]) == len(conversations) == {"train": 2000, "validation": 400}[split]
    for messages, answer, result, conversation in zip(
        rows["messages"], rows["answer"], rows["result"], conversations, strict=True
    ):
        assert isinstance(conversation, list) and isinstance(messages, list)
        assert isinstance(answer, str) and isinstance(result, str)
        row = {"messages": messages, "answer": answer, "result": result}
        assert prompt_problems(row) == []  # ends with a user turn
        cut = len(messages)
        assert conversation[cut]["role"] == "assistant" and cut == len(conversation) - 1
        assert messages == [{"role": m["role"], "content": m["content"]}
                            for m in conversation[:cut]]  # fmt: skip  # no weight keys
        assert answer == conversation[cut]["content"] and answer.endswith(f" is {result}.")
        assert int(result) >= 0


def test_a_grpo_job_reads_train_and_validation_prompts_with_their_items() -> None:
    prompts = load_prompts(JobSpec.model_validate(job(max_eval_samples=3)))
    assert len(prompts.train) == 2000 and prompts.validation is not None
    assert len(prompts.validation) == 3
    first = arithmetic_prompts("validation")
    assert prompts.validation[0].item == {"answer": first["answer"][0],
                                          "result": first["result"][0]}  # fmt: skip
    assert list(prompts.validation[0].messages) == first["messages"][0]


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"method": "sft", "grpo": None}, "dataset"), ({"method": "dpo", "grpo": None}, "dataset"),
     ({"method": "sft", "grpo": None, "dataset": "builtin:chat-arithmetic",
       "eval_dataset": "builtin:arithmetic-prompts"}, "eval_dataset")],
)  # fmt: skip
def test_sft_and_dpo_refuse_the_prompts_naming_the_field(changes: dict[str, Any],
                                                         field: str) -> None:  # fmt: skip
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate(job(**changes))
    (error,) = refused.value.errors()
    assert error["loc"] == (field,) and "train it with method grpo" in error["msg"]
