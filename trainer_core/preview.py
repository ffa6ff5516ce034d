"""What a job would train on, shown before training: for the first rows of its dataset, each token
with whether it is trained after the causal shift (token t is trained when the loss takes the
prediction of t from the tokens before it), the row's trained and total tokens, and warnings; and
the job's memory plan per device (``trainer_core.model.memory_plan``) at its micro-batch and
``max_seq_length``, against ``device_bytes`` when given.

The counts are the trainer's: a row's ``trained`` is its ``n_items`` (what the loss is divided by,
summed over a window), made by the same rendering, masking and truncation as the job's data. Run
as ``python -m trainer_core.preview`` it reads ``{"spec": {...}, "rows": N, "device_bytes": B}``
on stdin and writes
the preview (or ``{"error": {"message", "param"}}``, exit status 2) on stdout: how the API, which
loads no tokenizer, asks for one.

Example:
    >>> from trainer_core.spec.job import JobSpec
    >>> spec = JobSpec(model="builtin:tiny-chat", dataset="chats.jsonl", task="causal-lm")
    >>> preview(spec, rows=3)["rows"][0]["trained"]  # doctest: +SKIP
    12
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer
from transformers import AutoConfig, PretrainedConfig

from trainer_core.builtin.models import builtin_config, builtin_tokenizer
from trainer_core.data.chat import RenderedRow, decoded_conversation, rendered_row, token_mask
from trainer_core.data.chat_tools import decoded_tools
from trainer_core.data.encoding import Encoding, check_columns, encoding_for
from trainer_core.data.sources import load_source
from trainer_core.data.tokenized import tokenizer_for
from trainer_core.model.load import load_tokenizer
from trainer_core.model.memory_plan import plan_memory
from trainer_core.spec.chat import prompt_completion_problems, row_problems
from trainer_core.spec.errors import DatasetError, JobError
from trainer_core.spec.job import JobSpec
from trainer_core.spec.memory import inventory
from trainer_core.spec.sources import classify_source

MAX_ROWS = 50
FALLBACK = (
    "the chat template has no {% generation %} markers: each assistant turn was found by "
    "rendering the conversation up to it (the same tokens a marked template trains)"
)
REASONING = (
    "an empty reasoning block the template writes (<think></think>) is trained, though the model "
    "would not generate it unprompted; train_empty_reasoning: false leaves it out"
)
NOTHING = "nothing is trained in this row: the trainer drops it"


def preview(spec: JobSpec, rows: int = 5, device_bytes: int | None = None) -> dict[str, Any]:
    """The first ``rows`` rows of ``spec.dataset`` as the job would train them, and its plan."""
    tokenizer = load_tokenizer(spec)
    split = load_source(spec.dataset, "dataset")["train"]
    table = split.select(range(min(rows, MAX_ROWS, len(split)))).data.table
    encoding = encoding_for(spec, tokenizer, split.column_names, None)
    check_columns(spec, encoding.format, split.column_names, "dataset")
    if encoding.format == "preference":
        raise DatasetError(
            "dataset_format: a preview shows messages, prompt-completion and text "
            "rows, not preference pairs",
            param="dataset_format",
        )
    backend = tokenizer_for(encoding.kwargs["tokenizer_json"], None)
    text_rows = encoding.format == "text"  # encoded as the trainer does: special tokens added
    shown = [
        _row(i, *texts, backend, encoding.kwargs["max_length"], add_special=text_rows)
        for i, texts in enumerate(_spans(encoding, table))
    ]
    return {
        "format": encoding.format,
        "max_length": encoding.kwargs["max_length"],
        "rows": shown,
        "memory_plan": memory_plan(spec, device_bytes),
    }


def memory_plan(spec: JobSpec, device_bytes: int | None) -> dict[str, Any] | None:
    """The job's plan per device, at its micro-batch (1 for "auto") of ``max_seq_length``
    tokens; None for a model whose config is not at hand or of a family the plan cannot count."""
    config = _config(spec)
    if config is None or inventory(config.to_dict()) is None:
        return None
    b = spec.per_device_train_batch_size
    shards = spec.num_processes if spec.sharding == "fsdp" else 1
    plan = plan_memory(
        spec,
        config,
        micro_batch=1 if b == "auto" else b,
        seq_len=spec.max_seq_length,
        device_bytes=device_bytes,
        shards=shards,
    )
    return plan.as_dict() | {"line": plan.line()}


def _config(spec: JobSpec) -> PretrainedConfig | None:
    if classify_source(spec.model) == "builtin":
        return builtin_config(spec.model, builtin_tokenizer(spec.model))
    try:  # a whole model's config (a folder's, or a cached hub id's); an adapter has none
        config: PretrainedConfig = AutoConfig.from_pretrained(spec.model, trust_remote_code=False)
    except (OSError, ValueError):
        return None
    return config


Spanned = tuple[str, list[tuple[int, int]], list[str]]  # text, trained spans, warnings


def _spans(encoding: Encoding, table: pa.Table) -> list[Spanned]:
    kw = encoding.kwargs
    if encoding.format == "messages":
        return [_conversation(i, row, kw) for i, row in enumerate(table.to_pylist())]
    if encoding.format == "prompt-completion":
        out: list[Spanned] = []
        columns = (kw["prompt_column"], kw["completion_column"])
        for i, row in enumerate(table.select(list(columns)).to_pylist()):
            _refuse(i, prompt_completion_problems(row, *columns), "prompt_column")
            prompt, completion = row[kw["prompt_column"]], row[kw["completion_column"]]
            text = prompt + completion + kw["eos_token"]
            out.append((text, [(len(prompt) if kw["completion_only"] else 0, len(text))], []))
        return out
    return [(str(t), [(0, len(str(t)))], []) for t in table.column(kw["text_column"]).to_pylist()]


def _refuse(index: int, problems: list[str], param: str) -> None:
    if problems:
        raise DatasetError(f"{param}: row {index + 1}: {problems[0]}", param=param)


def _conversation(index: int, row: dict[str, Any], kw: dict[str, Any]) -> Spanned:
    column = kw["messages_column"]
    row = {
        **row,
        column: decoded_conversation(row[column]),
        "tools": decoded_tools(row.get("tools")),
    }
    _refuse(index, row_problems(row, column), "messages_column")
    try:
        rendered = _rendered(row, kw)
    except ValueError as exc:  # the template's (the messages name it "chat_template: ...")
        raise DatasetError(f"{exc} (row {index + 1})", param="chat_template") from exc
    warnings = [FALLBACK] if rendered.fallback and kw["assistant_only"] else []
    if rendered.empty_reasoning and kw["train_empty_reasoning"]:
        warnings.append(REASONING)
    return rendered.text, rendered.spans, warnings


def _rendered(row: dict[str, Any], kw: dict[str, Any]) -> RenderedRow:
    return rendered_row(
        row[kw["messages_column"]],
        kw["template"],
        kw["template_kwargs"],
        assistant_only=kw["assistant_only"],
        tools=row["tools"],
        train_empty_reasoning=kw["train_empty_reasoning"],
    )


def _row(
    index: int,
    text: str,
    spans: list[tuple[int, int]],
    warnings: list[str],
    backend: Tokenizer,
    max_length: int,
    *,
    add_special: bool,
) -> dict[str, Any]:
    """One row: tokens cut at ``max_length`` as the trainer cuts them; a token's ``trained`` is
    its label's (the first token predicts nothing, so it is never trained)."""
    encoding = backend.encode(text, add_special_tokens=add_special)
    # Text rows: every token is a label (and special tokens the tokenizer adds carry no offsets).
    full = (
        np.ones(len(encoding.ids), np.uint8) if add_special else token_mask(encoding.offsets, spans)
    )
    mask = full[:max_length].copy()
    mask[:1] = 0  # after the shift
    cut = int(full[1:].sum()) - int(mask.sum())
    warnings = list(warnings)
    if cut:
        warnings.append(f"{cut} trained tokens lie past max_seq_length ({max_length}): cut away")
    if not mask.any():
        warnings.append(NOTHING)
    ids = encoding.ids[:max_length]
    tokens = [
        {"text": backend.decode([t], skip_special_tokens=False), "trained": bool(m)}
        for t, m in zip(ids, mask, strict=True)
    ]
    return {
        "index": index,
        "tokens": tokens,
        "trained": int(np.sum(mask)),
        "total": len(ids),
        "warnings": warnings,
    }


def main() -> int:
    request = json.load(sys.stdin)
    try:
        spec = JobSpec.model_validate(request["spec"])
        device = request.get("device_bytes")
        result = preview(spec, int(request.get("rows", 5)), None if device is None else int(device))
    except JobError as exc:
        json.dump({"error": {"message": str(exc), "param": exc.param}}, sys.stdout)
        return 2
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
