"""A GRPO job's prompts: chat messages ending with a user turn, and every other field of the row
kept for the reward as ``item`` (OpenAI's ``item.*`` in graders), read from the spec's sources:
``dataset`` (its train split) and the validation prompts, from ``eval_dataset`` or the dataset's
own validation split (none otherwise: nothing is held out of a prompt file, since every prompt
trains and evaluation is opt-in). A row that is not a prompt fails the job naming the dataset's
field and the row."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from transformers import PreTrainedTokenizerBase

from trainer_core.data.sources import load_source
from trainer_core.spec.errors import DatasetError
from trainer_core.spec.job import JobSpec

if TYPE_CHECKING:
    import datasets


@dataclass(frozen=True)
class PromptRow:
    messages: Sequence[Mapping[str, Any]]
    item: Mapping[str, Any]  # the row without its messages: what a grader reads as item.*


def prompt_rows(rows: Iterable[Mapping[str, Any]]) -> list[PromptRow]:
    """The rows as prompts; a row whose messages do not end with a user turn is refused by
    number, since the model answers the last turn and a trailing assistant turn has no answer to
    sample."""
    prompts = []
    for number, row in enumerate(rows):
        messages = row.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"messages: row {number} has no list of messages")
        if not isinstance(messages[-1], Mapping) or messages[-1].get("role") != "user":
            raise ValueError(f"messages: row {number} must end with a user turn")
        item = {key: value for key, value in row.items() if key != "messages"}
        prompts.append(PromptRow(messages, item))
    return prompts


def encode_prompt(tokenizer: PreTrainedTokenizerBase, row: PromptRow) -> list[int]:
    """The prompt's tokens, the template's generation header included: what the model continues."""
    encoded: Any = tokenizer.apply_chat_template(
        cast(Any, list(row.messages)), add_generation_prompt=True
    )
    ids = encoded if isinstance(encoded, list) else encoded["input_ids"]
    return [int(token) for token in ids]


@dataclass(frozen=True)
class JobPrompts:
    train: list[PromptRow]
    validation: list[PromptRow] | None


def _rows(split: datasets.Dataset, spec: JobSpec, limit: int | None, param: str) -> list[PromptRow]:
    column = spec.messages_column
    if column not in split.column_names:
        raise DatasetError(
            f"{param}: no column {column!r} (messages_column); its columns: "
            f"{', '.join(split.column_names)}",
            param=param,
        )
    rows: list[dict[str, Any]] = []
    for row in split.select(range(min(limit or len(split), len(split)))):
        rest = {key: value for key, value in row.items() if key != column}
        rows.append({**rest, "messages": row[column]})
    try:
        return prompt_rows(rows)
    except ValueError as exc:
        raise DatasetError(f"{param}: {exc}", param=param) from None


def load_prompts(spec: JobSpec) -> JobPrompts:
    """The job's training prompts (``max_train_samples`` first ones) and validation prompts
    (``max_eval_samples``), or None when there is no validation split."""
    train = load_source(spec.dataset, "dataset")
    rows = _rows(train["train"], spec, spec.max_train_samples, "dataset")
    if spec.eval_dataset is not None:
        given = load_source(spec.eval_dataset, "eval_dataset")
        split = given["validation" if "validation" in given else "train"]
        return JobPrompts(rows, _rows(split, spec, spec.max_eval_samples, "eval_dataset"))
    if "validation" in train:
        return JobPrompts(rows, _rows(train["validation"], spec, spec.max_eval_samples, "dataset"))
    return JobPrompts(rows, None)
