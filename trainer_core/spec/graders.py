"""OpenAI's graders as its SDK sends them (``openai.types.graders``), parsed and checked here so a
reinforcement job's spec, the API's ``/v1/fine_tuning/alpha/graders/*`` and the training child read
one definition. Torch-free; running a grader is ``trainer_core.graders``' job, not this module's.

Example:

>>> g = parse_grader({"type": "string_check", "name": "exact", "operation": "eq",
...                   "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"})
>>> g.operation
'eq'
"""

from __future__ import annotations

import ast
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

MAX_TEMPLATE = 65_536
MAX_SOURCE = 256 * 1024  # OpenAI's limit on a python grader's code
TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
# A template names ``namespace.path``: a dotted path whose steps may index lists (``a.b[0].c``).
VARIABLE = re.compile(r"^(item|sample)((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)$")
TextMetric = Literal[
    "cosine",
    "fuzzy_match",
    "bleu",
    "gleu",
    "meteor",
    "rouge_1",
    "rouge_2",
    "rouge_3",
    "rouge_4",
    "rouge_5",
    "rouge_l",
]
# Metrics that need data or a model this server does not have: refused by name, not guessed.
UNSERVED_METRICS = {
    "cosine": "it needs an embedding model, and none is configured on this server",
    "meteor": "it needs the WordNet data, which nltk downloads at run time and this server lacks",
}
FORMULA_FUNCTIONS = frozenset({"min", "max", "abs", "floor", "ceil", "exp", "sqrt", "log"})


def check_template(text: str) -> str:
    """Each ``{{ … }}`` must name ``item.*`` or ``sample.*``, as OpenAI's templates do."""
    for match in TEMPLATE.finditer(text):
        name = match.group(1).strip()
        if not VARIABLE.match(name):
            raise ValueError(
                f"template variable {{{{ {name} }}}} must be item.<path> or sample.<path>"
            )
    return text


Template = Annotated[str, Field(max_length=MAX_TEMPLATE)]


class _Grader(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(max_length=256)


class StringCheckGrader(_Grader):
    type: Literal["string_check"]
    input: Template
    reference: Template
    operation: Literal["eq", "ne", "like", "ilike"]

    _templates = field_validator("input", "reference")(check_template)


class TextSimilarityGrader(_Grader):
    type: Literal["text_similarity"]
    input: Template
    reference: Template
    evaluation_metric: TextMetric
    pass_threshold: float | None = None  # the evals guide's field; a score is returned either way

    _templates = field_validator("input", "reference")(check_template)

    @field_validator("evaluation_metric")
    @classmethod
    def _served(cls, metric: str) -> str:
        if metric in UNSERVED_METRICS:
            raise ValueError(f"{metric!r} is not served: {UNSERVED_METRICS[metric]}")
        return metric


class PythonGrader(_Grader):
    type: Literal["python"]
    source: str = Field(max_length=MAX_SOURCE)
    image_tag: str | None = None  # OpenAI's image; here the server's own interpreter

    @field_validator("source")
    @classmethod
    def _defines_grade(cls, source: str) -> str:
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            raise ValueError(f"the source does not parse: {exc.msg} (line {exc.lineno})") from None
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        if "grade" not in names:
            raise ValueError("the source must define grade(sample, item) at its top level")
        return source


class InputText(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["input_text", "output_text"]
    text: Template

    _templates = field_validator("text")(check_template)


class Message(BaseModel):
    """A model grader's message. Text parts only: images and audio are refused by name, since the
    server's own chat models read text."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    role: Literal["user", "assistant", "system", "developer"]
    content: Template | InputText | list[Template | InputText]
    type: Literal["message"] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        for part in value if isinstance(value, list) else [value]:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("input_image", "input_audio"):
                raise ValueError(f"{kind} content is not served; model graders read text")
        if isinstance(value, str):
            check_template(value)
        elif isinstance(value, list):
            for part in value:
                if isinstance(part, str):
                    check_template(part)
        return value


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    max_completions_tokens: int | None = Field(default=None, ge=1)
    reasoning_effort: str | None = None  # read by a reasoning model upstream; ours have none
    seed: int | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)


class ScoreModelGrader(_Grader):
    type: Literal["score_model"]
    model: str = Field(min_length=1, max_length=256)
    input: list[Message] = Field(min_length=1)
    range: tuple[float, float] | None = None
    sampling_params: SamplingParams | None = None

    @field_validator("range")
    @classmethod
    def _ordered(cls, bounds: tuple[float, float] | None) -> tuple[float, float] | None:
        if bounds is not None and not bounds[0] < bounds[1]:
            raise ValueError("range must be [low, high] with low < high")
        return bounds

    @property
    def bounds(self) -> tuple[float, float]:
        return self.range or (0.0, 1.0)


class LabelModelGrader(_Grader):
    type: Literal["label_model"]
    model: str = Field(min_length=1, max_length=256)
    input: list[Message] = Field(min_length=1)
    labels: list[str] = Field(min_length=1)
    passing_labels: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _passing_subset(self) -> LabelModelGrader:
        extra = [label for label in self.passing_labels if label not in self.labels]
        if extra:
            raise ValueError(f"passing_labels must be a subset of labels; not in labels: {extra}")
        return self


SubGrader = Annotated[
    StringCheckGrader | TextSimilarityGrader | PythonGrader | ScoreModelGrader | LabelModelGrader,
    Field(discriminator="type"),
]


# Sub-graders a multi grader may hold: each may be a python grader of up to two minutes, run one
# after another. OpenAI's examples combine two to four; 16 leaves room and bounds the work.
MAX_SUB_GRADERS = 16


class MultiGrader(_Grader):
    """Named graders combined by ``calculate_output``, a formula over their names."""

    type: Literal["multi"]
    graders: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], SubGrader] = Field(
        min_length=1
    )
    calculate_output: str = Field(min_length=1, max_length=4096)

    @field_validator("graders", mode="before")
    @classmethod
    def _one_grader(cls, value: Any) -> Any:
        """The SDK's type names one grader here; OpenAI's guide a map of them. One becomes a map
        under its own name."""
        if isinstance(value, dict) and isinstance(value.get("type"), str):
            return {str(value.get("name", "grader")): value}
        if isinstance(value, dict) and len(value) > MAX_SUB_GRADERS:  # before parsing each one
            raise ValueError(
                f"{len(value)} graders; a multi grader holds at most {MAX_SUB_GRADERS}"
            )
        return value

    @model_validator(mode="after")
    def _formula_names_graders(self) -> MultiGrader:
        check_formula(self.calculate_output, set(self.graders))
        return self


def check_formula(formula: str, names: set[str]) -> ast.expr:
    """Arithmetic over the graders' names, numbers and a few functions; nothing else parses."""
    try:
        tree = ast.parse(formula.replace("^", "**"), mode="eval").body
    except SyntaxError:
        raise ValueError(f"calculate_output does not parse: {formula!r}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in names | FORMULA_FUNCTIONS:
            raise ValueError(f"calculate_output names {node.id!r}, not a grader of this multi")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in FORMULA_FUNCTIONS
        ):
            raise ValueError(f"calculate_output may call only {sorted(FORMULA_FUNCTIONS)}")
        allowed = (
            ast.BinOp,
            ast.UnaryOp,
            ast.Call,
            ast.Name,
            ast.Constant,
            ast.Load,
            ast.Add,
            ast.Sub,
            ast.Mult,
            ast.Div,
            ast.Pow,
            ast.USub,
            ast.UAdd,
        )
        if not isinstance(node, allowed) or (
            isinstance(node, ast.Constant) and not isinstance(node.value, int | float)
        ):
            raise ValueError(f"calculate_output may hold only arithmetic: {formula!r}")
    return tree


Grader = Annotated[
    StringCheckGrader | TextSimilarityGrader | PythonGrader | ScoreModelGrader | MultiGrader,
    Field(discriminator="type"),
]
GRADER_TYPES = frozenset(
    {"string_check", "text_similarity", "python", "score_model", "label_model", "multi"}
)
_ADAPTER: TypeAdapter[Grader] = TypeAdapter(Grader)


def parse_grader(value: Any) -> Grader:
    """A grader dict as the SDK sends it; raises pydantic's ValidationError (see ``error_param``).
    ``label_model`` is allowed only inside ``multi``, as OpenAI allows it."""
    if isinstance(value, dict) and value.get("type") == "label_model":
        raise ValueError("label_model is allowed only inside a multi grader")
    return _ADAPTER.validate_python(value)


def error_param(loc: tuple[int | str, ...], prefix: str = "grader") -> str:
    """A pydantic location as a field path (``grader.graders.a.operation``): the union's tags
    (``multi``, ``string_check``) that pydantic puts after each grader are left out."""
    parts: list[str] = []
    expect_tag = True  # the root is a union: its first part is a tag
    for part in loc:
        if expect_tag and part in GRADER_TYPES:
            expect_tag = False
            continue
        parts.append(str(part))
        expect_tag = len(parts) >= 2 and parts[-2] == "graders"
    return ".".join([prefix, *parts])
