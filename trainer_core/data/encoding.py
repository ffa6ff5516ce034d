"""How a job's rows become tokens: the dataset's format (found from its columns, or named), the
columns that format reads, and the encoder (``tokenized.encode_batch`` for text and labels,
``chat.encode_messages`` or ``chat.encode_prompt_completion``) with what it needs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from transformers import PreTrainedTokenizerBase

from trainer_core.data.cache_key import backend_json
from trainer_core.data.chat import encode_messages, encode_prompt_completion
from trainer_core.data.dpo import encode_preference
from trainer_core.data.tokenized import encode_batch
from trainer_core.spec.chat import ResolvedFormat, no_template, template_text
from trainer_core.spec.errors import DatasetError, ModelError
from trainer_core.spec.fields import MAX_TEMPLATE_CHARS
from trainer_core.spec.job import JobSpec


@dataclass(frozen=True)
class Encoding:
    format: ResolvedFormat
    columns: list[tuple[str, str]]  # (spec field, column) that the rows must have
    encode: Callable[..., pa.Table]
    kwargs: dict[str, Any] = field(default_factory=dict)
    with_indices: bool = False  # chat encoders name a bad row by its position


def max_length(spec: JobSpec, tokenizer: PreTrainedTokenizerBase) -> int:
    # Never longer than the model's positions (tokenizers record it; huge values mean "unset").
    limit = tokenizer.model_max_length
    return min(spec.max_seq_length, limit) if limit < 1_000_000 else spec.max_seq_length


def chat_template_of(spec: JobSpec, tokenizer: PreTrainedTokenizerBase) -> str:
    """The template a messages job renders with: the spec's (a name or Jinja), or the
    tokenizer's own; it is saved with the model (``model.load.load_tokenizer``)."""
    if spec.chat_template is not None:
        return template_text(spec.chat_template)
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):  # None, or a dict of named templates
        raise ModelError(f"chat_template: {no_template(spec.model)}", param="chat_template")
    if len(template) > MAX_TEMPLATE_CHARS:  # an uploaded model's own: as long as a spec's may be
        raise ModelError(
            f"chat_template: the model's is over {MAX_TEMPLATE_CHARS} characters",
            param="chat_template",
        )
    return template


def encoding_for(
    spec: JobSpec,
    tokenizer: PreTrainedTokenizerBase,
    columns: Sequence[str],
    label_names: list[str] | None,
) -> Encoding:
    fmt = spec.format_for(columns)
    common: dict[str, Any] = {
        "tokenizer_json": backend_json(tokenizer),
        "max_length": max_length(spec, tokenizer),
    }
    if fmt == "messages":
        kwargs = common | {
            "messages_column": spec.messages_column,
            "template": chat_template_of(spec, tokenizer),
            "template_kwargs": dict(tokenizer.special_tokens_map),  # as apply_chat_template does
            "assistant_only": spec.assistant_only_loss,
            "refuse_longer": spec.overlong_rows == "refuse",
            "train_empty_reasoning": spec.train_empty_reasoning,
        }
        return Encoding(fmt, spec.needed_columns(fmt), encode_messages, kwargs, with_indices=True)
    if fmt == "preference":
        return _preference_encoding(spec, tokenizer, common)
    if fmt == "prompt-completion":
        if tokenizer.eos_token is None:
            raise ModelError("model: its tokenizer has no EOS to end a completion", param="model")
        kwargs = common | {
            "prompt_column": spec.prompt_column,
            "completion_column": spec.completion_column,
            "eos_token": tokenizer.eos_token,
            "completion_only": spec.completion_only_loss,
            "refuse_longer": spec.overlong_rows == "refuse",
        }
        return Encoding(
            fmt, spec.needed_columns(fmt), encode_prompt_completion, kwargs, with_indices=True
        )
    label = spec.resolved_label_column
    kwargs = common | {
        "text_column": spec.text_column,
        "label_column": label,
        "label_index": None if label_names is None else {n: i for i, n in enumerate(label_names)},
    }
    return Encoding(fmt, spec.needed_columns(fmt), encode_batch, kwargs)


def _preference_encoding(
    spec: JobSpec, tokenizer: PreTrainedTokenizerBase, common: dict[str, Any]
) -> Encoding:
    """Pairs (``data.dpo``): a prompt of messages renders with the chat template, which is
    looked up when a row needs it (a file of prompt strings trains on a model without one)."""
    template = spec.chat_template or getattr(tokenizer, "chat_template", None)
    kwargs = common | {
        "columns": spec.columns,
        "template": template_text(template) if isinstance(template, str) else "",
        "template_kwargs": dict(tokenizer.special_tokens_map),
        "eos_token": tokenizer.eos_token or "",
        "refuse_longer": spec.overlong_rows == "refuse",
    }
    if isinstance(template, str):
        kwargs["template"] = chat_template_of(spec, tokenizer)  # its checks (length)
    return Encoding(
        "preference",
        spec.needed_columns("preference"),
        encode_preference,
        kwargs,
        with_indices=True,
    )


def check_columns(spec: JobSpec, fmt: ResolvedFormat, columns: Sequence[str], param: str) -> None:
    for spec_field, column in spec.missing_columns(fmt, columns)[:1]:
        raise DatasetError(
            f"{spec_field}: column {column!r} not found in {param} (format {fmt}; columns: "
            f"{list(columns)})",
            param=spec_field,
        )
