"""OpenAI's /v1/chat/completions and /v1/completions bodies and answers, as the ``openai`` SDK's
types define them. A field OpenAI has and gradacc does not serve is declared here so that sending
it is a 400 naming it (``api.services.chat``), not an "unknown field"."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_MESSAGES = 512
MAX_TEXT = 2**20  # characters in one message or prompt (the model's context refuses far fewer)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ContentPart(BaseModel):
    """A part of a message's content: ``{"type": "text", "text": ...}`` is served; any other
    type (an image, audio, a file) is refused naming it."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(max_length=64)
    text: str | None = Field(default=None, max_length=MAX_TEXT)


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = Field(default=None, max_length=MAX_TEXT)
    name: str | None = Field(default=None, max_length=256)
    refusal: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    function_call: dict[str, Any] | None = None
    audio: dict[str, Any] | None = None


class StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class _Sampling(_Strict):
    model: str = Field(min_length=1, max_length=512, description="A base model or an ft: name")
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    n: int | None = Field(default=None, ge=1, le=8)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    stop: str | list[str] | None = Field(default=None, max_length=4)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, max_length=256, description="Accepted, not used")
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    # Served when the model's chat template renders them ("auto" and "none" choices only).
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=128)
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    # OpenAI's, not served here: refused naming them when given.
    functions: list[dict[str, Any]] | None = None
    function_call: Any = None
    response_format: dict[str, Any] | None = None
    audio: dict[str, Any] | None = None
    modalities: list[str] | None = None
    prediction: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    web_search_options: dict[str, Any] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None


class CompletionRequest(_Sampling):
    prompt: str = Field(max_length=MAX_TEXT, description="One prompt (lists are not served)")
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1, le=20)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None
    refusal: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: dict[str, Any] | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Literal["stop", "length"]
    logprobs: dict[str, Any] | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    system_fingerprint: str | None = None
