"""The cache key of a job's tokenized data: everything that decides which rows hold which ids.

- the data's content: a local file's SHA-256, a built-in's name (generated deterministically), or,
  for a folder or a hub dataset, the ``datasets`` fingerprint of the loaded splits;
- the tokenizer: the SHA-256 of its full JSON definition (vocabulary, normaliser, post-processor);
- ``max_seq_length``, the text and label columns, the task;
- how rows read: the dataset format asked for and its columns, the chat template (the spec's and
  the tokenizer's own), what is trained (``assistant_only_loss``, ``completion_only_loss``);
- how the eval split is made: the hold-out's seed and percentage, ``max_train/eval_samples``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from transformers import PreTrainedTokenizerBase

from trainer_core.data.cache import file_sha256
from trainer_core.spec.errors import ModelError
from trainer_core.spec.job import JobSpec
from trainer_core.spec.sources import classify_source, local_path

CACHE_FORMAT = 3  # bump when the layout of an entry changes: old entries are then never hit
TURN_RULE = 2  # bump when what a chat turn trains changes (2: its separator is not trained)


def backend_json(tokenizer: PreTrainedTokenizerBase) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ModelError("model: the data path needs a fast (Rust) tokenizer", param="model")
    text: str = backend.to_str()
    return text


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _identity(source: str) -> str | None:
    kind = classify_source(source)
    if kind == "builtin":
        return source
    path = local_path(source)
    if kind == "local" and path.is_file():
        return f"sha256:{file_sha256(path)}"
    return None  # a folder or a hub id: known only once loaded


def data_identity(spec: JobSpec) -> list[str] | None:
    """The content identity of the job's data without loading it, or None when it needs loading
    (a folder, a hub dataset) or the file is missing (loading then reports the error)."""
    train = _identity(spec.dataset)
    evaluation = _identity(spec.eval_dataset) if spec.eval_dataset is not None else "-"
    if train is None or evaluation is None:
        return None
    return [train, evaluation]


def cache_key(
    spec: JobSpec, tokenizer: PreTrainedTokenizerBase, sources: list[str]
) -> tuple[str, dict[str, Any]]:
    """(key, a readable description of the entry for ``gradacc cache show``)."""
    description: dict[str, Any] = {
        "dataset": spec.dataset,
        "eval_dataset": spec.eval_dataset,
        "model": spec.model,
        "task": spec.task,
        "max_seq_length": spec.max_seq_length,
        "text_column": spec.text_column,
        "label_column": spec.resolved_label_column,
        "dataset_format": spec.dataset_format,
    }
    keyed = {
        **description,
        "format": CACHE_FORMAT,
        "sources": sources,
        "tokenizer": _sha256(backend_json(tokenizer)),
        "model_max_length": min(tokenizer.model_max_length, 10**9),
        "max_train_samples": spec.max_train_samples,
        "max_eval_samples": spec.max_eval_samples,
        "columns": [spec.messages_column, spec.prompt_column, spec.completion_column],
        "chat_template": spec.chat_template,
        "tokenizer_template": _sha256(str(getattr(tokenizer, "chat_template", None))),
        "special_tokens": tokenizer.special_tokens_map,  # what templates and the EOS read
        "trained": [spec.assistant_only_loss, spec.completion_only_loss],
        "turn_rule": [TURN_RULE, spec.train_empty_reasoning],  # which tokens a chat turn trains
        "overlong_rows": spec.overlong_rows,  # a refusing job never opens what a cut one built
    }
    if spec.eval_dataset is None and classify_source(spec.dataset) != "builtin":
        # a hold-out (built-ins bring a validation split): its seed and size pick the rows
        keyed |= {"seed": spec.seed, "holdout": spec.validation_split_percentage}
    del keyed["model"]  # the tokenizer's content counts, not the name it was loaded by
    digest = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()
    return digest[:32], description
