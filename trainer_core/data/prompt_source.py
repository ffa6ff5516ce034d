"""A GRPO job's prompts from its spec's sources: ``dataset`` (its train split) and the validation
prompts, from ``eval_dataset`` or the dataset's own validation split (none otherwise: nothing is
held out of a prompt file, since every prompt trains and evaluation is opt-in).

Each row's ``messages_column`` is its conversation, ending with a user turn; every other column is
the row's ``item`` for the grader (``trainer_core.data.prompts``). A row that is not a prompt
fails the job naming the dataset's field and the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer_core.data.prompts import PromptRow, prompt_rows
from trainer_core.data.sources import load_source
from trainer_core.spec.errors import DatasetError
from trainer_core.spec.job import JobSpec

if TYPE_CHECKING:
    import datasets


@dataclass(frozen=True)
class JobPrompts:
    train: list[PromptRow]
    validation: list[PromptRow] | None


def _rows(split: datasets.Dataset, spec: JobSpec, limit: int | None,
          param: str) -> list[PromptRow]:  # fmt: skip
    column = spec.messages_column
    if column not in split.column_names:
        raise DatasetError(f"{param}: no column {column!r} (messages_column); its columns: "
                           f"{', '.join(split.column_names)}", param=param)  # fmt: skip
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
