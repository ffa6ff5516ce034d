"""Preference data and DPO, the torch-free part: the spec's fields, what a preference row may look
like, and its checks (the API checks uploads with them, the core the rows it trains on).

A preference row is a prompt and two completions of it, the chosen and the rejected. Two shapes:
- OpenAI's: ``{"input": {"messages": [...], "tools": [...]?}, "preferred_output": [one
  assistant message], "non_preferred_output": [one assistant message]}``;
- TRL's: ``{"prompt", "chosen", "rejected"}``, each a string or a list of messages (the prompt's
  messages, and one assistant message per completion).
Either becomes a ``PreferencePair``. A prompt of messages is rendered with the chat template and
its generation prompt; a prompt string is used as written (TRL's "standard" rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from trainer_core.spec.chat import OPENAI_PREFERENCE_COLUMNS, ROLES, ResolvedFormat
from trainer_core.spec.data_fields import DataFields
from trainer_core.spec.fields import (
    BUILTIN_DATASET_FORMATS,
    BUILTIN_PROMPT_DATASETS,
    check_column,
    refuse_inexact,
)

Method = Literal["sft", "dpo", "grpo"]
DpoLoss = Literal["sigmoid", "ipo", "hinge"]
ReferenceLogprobs = Literal["cached", "online"]
OPENAI_COLUMNS = OPENAI_PREFERENCE_COLUMNS
# Losses that couple the pairs of a micro-batch: a pair's loss depends on which other pairs share
# its micro-batch, so no division by the window's pair count makes accumulation exact.
# What is measured of each pair; a window's (an evaluation's) mean of each over its pairs (the
# core's meters and the API's OpenAI names read this one list).
PAIR_METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margins",
    "rewards/accuracies",
    "logps/chosen",
    "logps/rejected",
)
COUPLED_LOSSES = {
    "aot": "it sorts the log-ratios across the pairs of a micro-batch",
    "aot_pair": "it sorts the log-ratios across the pairs of a micro-batch",
    "aot_unpaired": "it sorts the log-ratios across the pairs of a micro-batch",
    "kto": "its reference point is a statistic of the micro-batch",
    "kto_pair": "its reference point is a statistic of the micro-batch",
}


class PreferenceFields(DataFields):
    """The data fields and, after them (their validators read the format), the DPO fields."""

    method: Method = Field(
        default="sft",
        description="sft: train on the data's trained tokens; dpo: preference pairs "
        "(dataset_format 'preference'), against the starting weights as reference; grpo: "
        "reinforcement on prompts (messages ending with a user turn) with a grader's reward "
        "(the grpo object)",
        examples=["sft"],
    )
    dpo_beta: float = Field(
        default=0.1,
        gt=0,
        le=1000,
        description="dpo: the strength of the reference (β)",
        examples=[0.1],
    )
    dpo_loss: DpoLoss = Field(
        default="sigmoid",
        description="dpo: sigmoid (DPO), ipo (IPO, length-normalised log-ratios) or hinge; "
        "each a loss per pair",
        examples=["sigmoid"],
    )
    rpo_alpha: float | None = Field(
        default=None,
        ge=0,
        le=1000,
        description="dpo: weight of an NLL term on the chosen completions' tokens (RPO), a "
        "token mean over the window; none: off",
        examples=[None],
    )
    reference_logprobs: ReferenceLogprobs = Field(
        default="cached",
        description="dpo: the reference's log-probs computed once per pair before training "
        "(cached, fp32) or at every micro-step (online); both give the same gradient",
        examples=["cached"],
    )
    chosen_column: str = Field(
        default="chosen",
        description="preference (TRL rows): the chosen completion",
        examples=["chosen"],
    )
    rejected_column: str = Field(
        default="rejected",
        description="preference (TRL rows): the rejected completion",
        examples=["rejected"],
    )

    @field_validator("dpo_loss", mode="before")
    @classmethod
    def _per_pair_loss(cls, value: Any) -> Any:
        choose = "its gradient changes with the micro-batch size: choose sigmoid, ipo or hinge (a loss per pair)"
        return refuse_inexact(value, COUPLED_LOSSES, choose)

    @field_validator("method")
    @classmethod
    def _method_fits_data(cls, value: Method, info: ValidationInfo) -> Method:
        fmt, task = info.data.get("dataset_format"), info.data.get("task")
        if fmt == "auto":  # a built-in dataset's format is known here; a file's at load
            fmt = BUILTIN_DATASET_FORMATS.get(info.data.get("dataset") or "", "auto")
        if value == "dpo" and task != "causal-lm":
            raise ValueError("dpo trains task causal-lm")
        prompts = info.data.get("dataset") in BUILTIN_PROMPT_DATASETS  # _prompts_for_grpo's
        if value == "dpo" and fmt not in (None, "auto", "preference") and not prompts:
            raise ValueError(f"dpo trains preference data, and dataset_format is {fmt!r}")
        if value == "sft" and fmt == "preference":
            raise ValueError("preference data trains with method 'dpo'")
        if value == "grpo":
            _check_grpo_data(task, fmt, info.data.get("dataset"))
        return value

    @field_validator("chosen_column", "rejected_column")
    @classmethod
    def _preference_column(cls, value: str) -> str:
        return check_column(value)

    @model_validator(mode="after")
    def _prompts_for_grpo(self) -> PreferenceFields:
        """Built-in prompts train with grpo only: an error naming the data's field, as an
        uploaded file's would (the method was chosen, the data is what does not fit it)."""
        for field in ("dataset", "eval_dataset"):
            source = getattr(self, field)
            if self.method != "grpo" and source in BUILTIN_PROMPT_DATASETS:
                message = (
                    f"{source} holds prompts (messages ending with a user turn, no "
                    f"answer to train): train it with method grpo"
                )
                error = PydanticCustomError("value_error", message)
                raise ValidationError.from_exception_data(
                    type(self).__name__, [InitErrorDetails(type=error, loc=(field,), input=source)]
                )
        return self

    def format_columns(self) -> dict[str, str]:
        return super().format_columns() | {
            "chosen_column": self.chosen_column,
            "rejected_column": self.rejected_column,
        }

    def needed_columns(self, fmt: ResolvedFormat) -> list[tuple[str, str]]:
        if fmt != "preference":
            return super().needed_columns(fmt)
        return [
            ("prompt_column", self.prompt_column),
            ("chosen_column", self.chosen_column),
            ("rejected_column", self.rejected_column),
        ]

    def missing_columns(self, fmt: ResolvedFormat, columns: Sequence[str]) -> list[tuple[str, str]]:
        if fmt == "preference" and set(OPENAI_COLUMNS) <= set(columns):
            return []  # OpenAI's rows: input, preferred_output, non_preferred_output
        return super().missing_columns(fmt, columns)

    @property
    def columns(self) -> dict[str, str]:
        """The keyword arguments of ``preference_problems`` and ``normalise_preference_row``."""
        return {
            "prompt_column": self.prompt_column,
            "chosen_column": self.chosen_column,
            "rejected_column": self.rejected_column,
        }


def _check_grpo_data(task: Any, fmt: Any, dataset: Any) -> None:
    """grpo samples answers to prompts: chat rows of a causal LM (a file's rows are checked at
    upload and as the job reads them; of the built-in chat data, only the prompt datasets)."""
    if task != "causal-lm":
        raise ValueError("grpo trains task causal-lm")
    if fmt not in (None, "auto", "messages"):
        raise ValueError(
            f"grpo trains prompts (messages ending with a user turn), and dataset_format is {fmt!r}"
        )
    if dataset in BUILTIN_DATASET_FORMATS and dataset not in BUILTIN_PROMPT_DATASETS:
        raise ValueError(
            f"grpo trains prompts (messages ending with a user turn); {dataset} "
            "holds whole conversations: upload a prompt file, or "
            f"use {', '.join(BUILTIN_PROMPT_DATASETS)}"
        )


@dataclass(frozen=True)
class PreferencePair:
    """One row, whatever its shape: a prompt (messages, or a string) and two completions."""

    prompt_messages: list[dict[str, Any]] | None
    prompt_text: str | None
    chosen: str
    rejected: str
    tools: list[Any] | None = None


def _prompt_problems(messages: Any, where: str) -> list[str]:
    if not isinstance(messages, list) or not messages:
        return [f"{where}: a non-empty list of messages"]
    problems = []
    for i, message in enumerate(messages):
        field = f"{where}[{i}]"
        if not isinstance(message, Mapping):
            problems.append(f"{field}: an object with role and content")
            continue
        if message.get("role") not in ROLES:
            problems.append(
                f"{field}.role: one of {', '.join(ROLES)} (got {message.get('role')!r})"
            )
        tool_call = message.get("role") == "assistant" and message.get("tool_calls")
        if not isinstance(message.get("content"), str) and not tool_call:
            problems.append(f"{field}.content: a string")
    return problems


def _completion_problems(value: Any, where: str) -> list[str]:
    """A completion: a string, or a list of exactly one assistant message with string content."""
    if isinstance(value, str):
        return [] if value else [f"{where}: a non-empty string"]
    if not isinstance(value, list) or len(value) != 1 or not isinstance(value[0], Mapping):
        return [f"{where}: one assistant message (a list of one), or a string"]
    message = value[0]
    problems = []
    if message.get("role") != "assistant":
        problems.append(f"{where}[0].role: must be 'assistant' (got {message.get('role')!r})")
    if message.get("tool_calls"):
        problems.append(f"{where}[0].tool_calls: not trained in preference pairs; give content")
    content = message.get("content")
    if not isinstance(content, str) or not content:
        problems.append(f"{where}[0].content: a non-empty string")
    return problems


def _openai_problems(row: Mapping[str, Any]) -> list[str]:
    source = row.get("input")
    if not isinstance(source, Mapping):
        return ["input: an object with messages"]
    problems = _prompt_problems(source.get("messages"), "input.messages")
    tools = source.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, Mapping) for t in tools)
    ):
        problems.append("input.tools: a list of tool objects")
    for column in OPENAI_COLUMNS[1:]:
        problems += _completion_problems(row.get(column), column)
    return problems


def _trl_problems(row: Mapping[str, Any], prompt: str, chosen: str, rejected: str) -> list[str]:
    value = row.get(prompt)
    if isinstance(value, str):
        problems = [] if value else [f"{prompt}: a non-empty string"]
    else:
        problems = _prompt_problems(value, prompt)
    strings = [isinstance(row.get(c), str) for c in (chosen, rejected)]
    for column in (chosen, rejected):
        problems += _completion_problems(row.get(column), column)
    if not problems and strings != [isinstance(value, str)] * 2:
        problems.append(f"{prompt}: a string with string completions, or messages with messages")
    return problems


def preference_problems(
    row: Any,
    *,
    prompt_column: str = "prompt",
    chosen_column: str = "chosen",
    rejected_column: str = "rejected",
) -> list[str]:
    """What is wrong with one row (each problem names its field path), or []."""
    if not isinstance(row, Mapping):
        return ["a JSON object per line"]
    if "input" in row or "preferred_output" in row or "non_preferred_output" in row:
        return _openai_problems(row)
    return _trl_problems(row, prompt_column, chosen_column, rejected_column)


def check_preference_row(row: Any, line: int, **columns: str) -> list[str]:
    """``preference_problems`` as "line N: field: what" (``line`` counted from 1)."""
    return [f"line {line}: {problem}" for problem in preference_problems(row, **columns)]


def _content(value: str | list[dict[str, Any]]) -> str:
    return value if isinstance(value, str) else str(value[0]["content"])


def normalise_preference_row(
    row: Mapping[str, Any],
    *,
    prompt_column: str = "prompt",
    chosen_column: str = "chosen",
    rejected_column: str = "rejected",
) -> PreferencePair:
    """The row as a ``PreferencePair``; raises ``ValueError`` naming the first problem."""
    columns = {
        "prompt_column": prompt_column,
        "chosen_column": chosen_column,
        "rejected_column": rejected_column,
    }
    problems = preference_problems(row, **columns)
    if problems:
        raise ValueError(problems[0])
    if "input" in row:
        source = row["input"]
        return PreferencePair(
            [dict(m) for m in source["messages"]],
            None,
            _content(row["preferred_output"]),
            _content(row["non_preferred_output"]),
            source.get("tools"),
        )
    prompt = row[prompt_column]
    messages = None if isinstance(prompt, str) else [dict(m) for m in prompt]
    text = prompt if isinstance(prompt, str) else None
    return PreferencePair(
        messages, text, _content(row[chosen_column]), _content(row[rejected_column])
    )
