"""The job spec's first fields: what to train on what, and how the data reads (columns, format,
chat template, what is trained). Part of ``JobSpec`` (``trainer_core.spec.job``)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
)

from trainer_core.spec.chat import DatasetFormat, ResolvedFormat, no_template, resolve_format
from trainer_core.spec.fields import (
    BUILTIN_CHAT_MODELS,
    BUILTIN_DATASET_FORMATS,
    BUILTIN_DATASETS,
    BUILTIN_MODEL_TASKS,
    BUILTIN_MODELS,
    MAX_TEMPLATE_CHARS,
    Backend,
    Task,
    check_chat_template,
    check_column,
    check_source,
)
from trainer_core.spec.spec_base import SpecBase


class DataFields(SpecBase):
    task: Task = Field(
        default="sequence-classification",
        description="sequence-classification (needs labels) or causal-lm (next-token prediction)",
        examples=["sequence-classification"],
    )
    backend: Backend = Field(
        default="pytorch",
        description="The training loop: plain PyTorch, HF Accelerate or the HF Trainer; "
        "all three give the same update for the same spec",
        examples=["pytorch"],
    )
    model: str = Field(
        description="builtin:tiny-bert (sequence-classification only), builtin:tiny-gpt2, "
        "an uploaded model (file-…), a save_pretrained directory under a data root, or a hub id "
        "('owner/name') in the server's cache or on the hub it reaches",
        examples=["builtin:tiny-bert"],
    )
    dataset: str = Field(
        description="builtin:sentiment (labelled), builtin:tiny-stories (text only), an uploaded "
        "dataset (file-…), a .csv/.jsonl/.json/.parquet file or a folder under a data root, or a "
        "hub dataset id ('name' or 'name:config') in the server's cache or on the hub it reaches",
        examples=["builtin:sentiment"],
    )
    eval_dataset: str | None = Field(
        default=None,
        description="Same forms as dataset; default: its validation split or a hold-out",
        examples=["builtin:sentiment"],
    )
    text_column: str = Field(
        default="text",
        description="The column holding the text: 1-128 letters, digits, spaces, '_', '-', '.'",
        examples=["text"],
    )
    label_column: str | None = Field(
        default=None,
        description="Classification only (none for causal-lm); defaults to 'label'",
        examples=["label"],
    )
    dataset_format: DatasetFormat = Field(
        default="auto",
        description="causal-lm: 'messages' (OpenAI chat rows: a list of {role, content, weight}), "
        "'prompt-completion', 'text', or 'auto': messages when messages_column exists, then "
        "prompt-completion when both of its columns exist, then text",
        examples=["auto"],
    )
    messages_column: str = Field(
        default="messages", description="The column of conversations", examples=["messages"]
    )
    prompt_column: str = Field(
        default="prompt", description="prompt-completion: the prompt", examples=["prompt"]
    )
    completion_column: str = Field(
        default="completion",
        description="prompt-completion: what is trained, with the EOS",
        examples=["completion"],
    )
    chat_template: str | None = Field(
        default=None,
        validate_default=True,
        max_length=MAX_TEMPLATE_CHARS,  # real templates (Qwen's, Llama's) pass the 1024 cap
        description="messages: the chat template, 'chatml' or a Jinja template; default the "
        "tokenizer's own. Saved with the model",
        examples=["chatml"],
    )
    assistant_only_loss: bool = Field(
        default=True,
        description="messages: train only assistant messages whose weight is not 0 (TRL's name)",
        examples=[True],
    )
    train_empty_reasoning: bool = Field(
        default=True,
        description="messages: train the empty reasoning block ('<think></think>') a template "
        "writes into an assistant turn without reasoning (Qwen3's do); false leaves it out",
        examples=[True],
    )
    completion_only_loss: bool = Field(
        default=True,
        description="prompt-completion: train only the completion and the EOS (TRL's name)",
        examples=[True],
    )

    @field_validator("model")
    @classmethod
    def _model_source(cls, value: str, info: ValidationInfo) -> str:
        value = check_source(value, builtins=BUILTIN_MODELS, what="model")
        task = info.data.get("task")
        if task is not None and task not in BUILTIN_MODEL_TASKS.get(value, (task,)):
            able = ", ".join(BUILTIN_MODEL_TASKS[value])
            raise ValueError(f"{value} cannot do task {task}; it does {able}")
        return value

    @field_validator("dataset", "eval_dataset")
    @classmethod
    def _dataset_source(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        value = check_source(value, builtins=tuple(BUILTIN_DATASETS), what="dataset")
        labelled = BUILTIN_DATASETS.get(value, True)
        if info.data.get("task") == "sequence-classification" and not labelled:
            raise ValueError(f"{value} has no labels; use it with task causal-lm")
        return value

    @field_validator("dataset_format")
    @classmethod
    def _format_fits_task(cls, value: DatasetFormat, info: ValidationInfo) -> DatasetFormat:
        task, dataset = info.data.get("task"), info.data.get("dataset")
        if value in ("messages", "prompt-completion", "preference") and task != "causal-lm":
            raise ValueError(f"{value} data trains task causal-lm")
        builtin = BUILTIN_DATASET_FORMATS.get(dataset or "", "text")
        if dataset in BUILTIN_DATASETS and value not in ("auto", builtin):
            raise ValueError(f"{dataset} is {builtin} data")
        return value

    @field_validator("chat_template")
    @classmethod
    def _template_for_messages(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A messages job needs a template: the model's or this one. Known here for built-ins
        (the service checks uploaded models at POST; a hub model is checked when it loads)."""
        if value is not None:
            return check_chat_template(value)
        model, dataset = info.data.get("model"), info.data.get("dataset") or ""
        fmt = info.data.get("dataset_format", "auto")
        messages = fmt == "messages" or (fmt == "auto" and dataset in BUILTIN_DATASET_FORMATS)
        if messages and model in BUILTIN_MODELS and model not in BUILTIN_CHAT_MODELS:
            raise ValueError(no_template(model))
        return None

    @field_validator("train_empty_reasoning")
    @classmethod
    def _reasoning_in_chat(cls, value: bool, info: ValidationInfo) -> bool:
        """Leaving reasoning blocks out means something only for chat rows of a causal LM."""
        fmt = info.data.get("dataset_format", "auto")
        if not value and (info.data.get("task") != "causal-lm" or fmt not in ("auto", "messages")):
            raise ValueError(
                "train_empty_reasoning: false applies to messages data (task causal-lm, "
                f"dataset_format messages or auto), not {info.data.get('task')} / {fmt}"
            )
        return value

    @field_validator(
        "text_column", "label_column", "messages_column", "prompt_column", "completion_column"
    )
    @classmethod
    def _column_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        check_column(value)
        if info.field_name == "label_column" and info.data.get("task") == "causal-lm":
            raise ValueError("a causal-lm task has no label column")
        return value

    def format_for(self, columns: Sequence[str]) -> ResolvedFormat:
        """The format rows of these columns are read in (``dataset_format`` "auto": found)."""
        return resolve_format(columns, self.dataset_format, **self.format_columns())

    def format_columns(self) -> dict[str, str]:
        """The column fields a format is found by (a method's fields may add theirs)."""
        return {
            "messages_column": self.messages_column,
            "prompt_column": self.prompt_column,
            "completion_column": self.completion_column,
        }

    def needed_columns(self, fmt: ResolvedFormat) -> list[tuple[str, str]]:
        """(spec field, column) that rows of this format must have."""
        if fmt == "messages":
            return [("messages_column", self.messages_column)]
        if fmt == "prompt-completion":
            return [
                ("prompt_column", self.prompt_column),
                ("completion_column", self.completion_column),
            ]
        label = self.resolved_label_column
        return [("text_column", self.text_column)] + ([("label_column", label)] if label else [])

    def missing_columns(self, fmt: ResolvedFormat, columns: Sequence[str]) -> list[tuple[str, str]]:
        """(spec field, column) that rows of this format must have and ``columns`` lacks."""
        return [
            (field, column) for field, column in self.needed_columns(fmt) if column not in columns
        ]

    @property
    def resolved_label_column(self) -> str | None:
        if self.task == "causal-lm":
            return None
        return self.label_column or "label"
