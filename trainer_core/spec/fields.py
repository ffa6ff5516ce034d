"""The value types, built-in names and checks of the job spec's fields (``trainer_core.spec.job``).
Torch-free, like the whole ``spec`` package."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from jinja2 import TemplateSyntaxError, nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import Field

from trainer_core.spec.chat import TEMPLATES
from trainer_core.spec.shapes import SHAPES
from trainer_core.spec.sources import FILE_ID_PREFIX, classify_source

# The tiny ones, and the real architectures without their weights (``spec.shapes``).
BUILTIN_MODELS = (
    *("builtin:tiny-bert", "builtin:tiny-gpt2", "builtin:tiny-chat", "builtin:small-chat"),
    *SHAPES,
)
# builtin model -> the tasks it can do (a BERT encoder has no causal attention mask)
BUILTIN_MODEL_TASKS = {
    "builtin:tiny-bert": ("sequence-classification",),
    "builtin:tiny-gpt2": ("sequence-classification", "causal-lm"),
    "builtin:tiny-chat": ("causal-lm",),
    "builtin:small-chat": ("causal-lm",),
    **dict.fromkeys(SHAPES, ("causal-lm",)),
}
# The built-in models whose tokenizer carries a chat template (with generation markers).
BUILTIN_CHAT_MODELS = ("builtin:tiny-chat", "builtin:small-chat", *SHAPES)
# builtin dataset -> does it carry labels?
BUILTIN_DATASETS = {
    "builtin:sentiment": True,
    "builtin:tiny-stories": False,
    "builtin:chat-arithmetic": False,
    "builtin:preference-arithmetic": False,
    "builtin:arithmetic-prompts": False,
}
# builtin dataset -> its format (``trainer_core.spec.chat``); the others are text
BUILTIN_DATASET_FORMATS = {
    "builtin:chat-arithmetic": "messages",
    "builtin:preference-arithmetic": "preference",
    "builtin:arithmetic-prompts": "messages",
}
# The built-in datasets of prompts (messages ending with a user turn): method grpo's only.
BUILTIN_PROMPT_DATASETS = ("builtin:arithmetic-prompts",)

Task = Literal["sequence-classification", "causal-lm"]
Backend = Literal["pytorch", "accelerate", "trainer"]
SaveStrategy = Literal["epoch", "steps", "no"]
SchedulerType = Literal[
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup"
]

# A hub id: "name" or "owner/name", letters, digits, "-", "_", "." (no "..", no leading dot).
# ASCII only (hub ids are); the API's schema states these very patterns (api/http/openapi.py).
HUB_ID_PATTERN = r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?$"
COLUMN_PATTERN = r"^[\w .-]{1,128}$"
_HUB_ID = re.compile(HUB_ID_PATTERN)
_COLUMN = re.compile(COLUMN_PATTERN)

PositiveInt = Annotated[int, Field(ge=1)]
MicroBatch = Annotated[int, Field(ge=1, le=65536)]
MixedPrecision = Literal["no", "bf16", "fp16"]
# Names as in TrainingArguments.optim.
Optimizer = Literal["adamw_torch", "adamw_torch_fused", "sgd", "adafactor"]


def check_source(value: str, *, builtins: tuple[str, ...], what: str) -> str:
    """Accept a builtin name, an uploaded file's id, a local path, or a hub id ("name" /
    "owner/name", optional ":config")."""
    if not value.strip():
        raise ValueError(f"{what} must not be empty")
    if value != value.strip():
        raise ValueError(f"{what} must not start or end with whitespace")
    if "\x00" in value or any(ord(ch) < 32 for ch in value):
        raise ValueError(f"{what} contains control characters")
    kind = classify_source(value)
    if kind == "builtin":
        if value not in builtins:
            raise ValueError(
                f"unknown builtin {what} {value!r}; choose one of {', '.join(builtins)}"
            )
        return value
    if kind in ("local", "file"):
        return value
    if kind == "fine_tuned":
        if what != "model":
            raise ValueError(f"{value!r} is a fine-tuned model, not a {what}")
        return value
    if value.startswith(FILE_ID_PREFIX):
        # Not a hub id that happens to start so: an upload's id, mistyped or cut short.
        raise ValueError(
            f"{what} {value!r} is not an uploaded file's id: those are 'file-' and 20 lowercase "
            "hex digits, as POST /v1/files returned"
        )
    hub_id = value.split(":", 1)[0] if what == "dataset" else value
    if not _HUB_ID.fullmatch(hub_id):
        raise ValueError(
            f"{what} {value!r} is neither a builtin, a local path, nor a hub id like 'owner/name'"
        )
    return value


def check_column(value: str) -> str:
    if not _COLUMN.fullmatch(value):
        raise ValueError("column names are 1-128 letters, digits, spaces, '_', '-' or '.'")
    return value


class _Generation(Extension):
    """``{% generation %}...{% endgeneration %}``, the marker transformers' chat templates use
    around trained text: parsed here only to check a template's syntax."""

    tags = {"generation"}  # noqa: RUF012  # jinja2 declares it an instance attribute

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


MAX_TEMPLATE_CHARS = 65536


def check_chat_template(value: str) -> str:
    """A template's name (``chatml``) or a Jinja template that parses, as transformers reads
    chat templates (loop controls, generation markers)."""
    if value in TEMPLATES:
        return value
    if len(value) > MAX_TEMPLATE_CHARS:
        raise ValueError(f"at most {MAX_TEMPLATE_CHARS} characters")
    environment = ImmutableSandboxedEnvironment(extensions=[_Generation, "jinja2.ext.loopcontrols"])
    try:
        environment.parse(value)
    except TemplateSyntaxError as exc:
        raise ValueError(
            f"not a Jinja template ({exc.message}, line {exc.lineno}); give a Jinja chat "
            f"template or one of {', '.join(TEMPLATES)}"
        ) from None
    except (RecursionError, MemoryError):  # deep nesting: the parser's stack, not a traceback
        raise ValueError(
            "nested too deeply to parse; give a flatter Jinja chat template or one of "
            f"{', '.join(TEMPLATES)}"
        ) from None
    if "messages" not in value:
        raise ValueError("a chat template renders `messages`; this one never reads them")
    return value


def refuse_inexact(value: object, refused: dict[str, str], choose: str) -> object:
    """A loss of ``refused`` (by name: why its gradient changes with the cut of a window) is a
    ValueError saying why and what to ``choose`` instead; any other value passes."""
    if isinstance(value, str) and value in refused:
        raise ValueError(f"{value!r} is not trained: {refused[value]}; {choose}")
    return value
