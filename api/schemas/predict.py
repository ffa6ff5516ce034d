"""POST /v1/jobs/{id}/predict: the request and the answers."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

# Sized so that the largest body the schema admits (every field at its limit, every character
# JSON-escaped to 6 bytes) stays under GRADACC_MAX_BODY_BYTES' default of 1 MB.
Text = Annotated[str, StringConstraints(max_length=2_000)]
LongText = Annotated[str, StringConstraints(max_length=4_000)]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: LongText


def _given(name: str) -> dict[str, Any]:
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


class PredictRequest(BaseModel):
    """A classifier takes ``inputs``; a causal LM a ``prompt`` or chat ``messages``."""

    # Exactly one of the three, as the schema says too (a null counts as not given).
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"oneOf": [_given(n) for n in ("inputs", "prompt", "messages")]},
    )
    inputs: list[Text] | None = Field(
        default=None, min_length=1, max_length=32, description="Classification: texts to label"
    )
    prompt: LongText | None = Field(default=None, description="Causal LM: text to continue")
    messages: list[ChatMessage] | None = Field(
        default=None, min_length=1, max_length=16, description="Chat: the conversation so far"
    )
    max_new_tokens: int = Field(default=64, ge=1, le=512)
    temperature: float = Field(default=0.0, ge=0, le=2, description="0: greedy")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="With temperature > 0")
    checkpoint: int | None = Field(
        default=None, ge=0, le=10**12, description="A kept checkpoint's step; default: model/"
    )

    @model_validator(mode="after")
    def _one_input(self) -> PredictRequest:
        given = [n for n in ("inputs", "prompt", "messages") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of inputs (classification), prompt or messages (causal LM)"
            )
        return self

    @property
    def kind(self) -> str:
        return "classify" if self.inputs is not None else "generate"


class Label(BaseModel):
    label: str
    score: float
    scores: dict[str, float]


class LabelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Label]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Generation(BaseModel):
    text: str
    message: AssistantMessage | None = None


def answer_model(kind: str, response: dict[str, Any]) -> BaseModel:
    return (
        LabelList.model_validate(response)
        if kind == "classify"
        else Generation.model_validate(response)
    )
