"""OpenAI's /v1/responses request body, as the ``openai`` SDK's types define it. Fields OpenAI
has and gradacc does not serve are declared so that sending one is a 400 naming it
(``gradacc.openai.responses_input``), not an "unknown field"."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from gradacc.openai.chat_requests import MAX_MESSAGES, MAX_TEXT


class ResponseCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=512, description="A base model or an ft: name")
    input: (
        Annotated[str, Field(max_length=MAX_TEXT)]
        | Annotated[list[dict[str, Any]], Field(min_length=1, max_length=MAX_MESSAGES)]
    ) = Field(
        description="A string (one user message) or items: messages with text parts, "
        "function_call and function_call_output",
    )
    instructions: str | None = Field(default=None, max_length=MAX_TEXT)
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    store: bool | None = Field(default=None, description="Kept for GET and previous_response_id")
    previous_response_id: str | None = Field(default=None, max_length=64)
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=128)
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    truncation: str | None = None
    include: list[str] | None = None
    user: str | None = Field(default=None, max_length=256, description="Accepted, not used")
    safety_identifier: str | None = Field(default=None, max_length=256)
    prompt_cache_key: str | None = Field(default=None, max_length=256)
    prompt_cache_retention: str | None = None
    service_tier: str | None = None
    # OpenAI's, not served here: refused naming them when given.
    reasoning: dict[str, Any] | None = None
    background: bool | None = None
    conversation: Any = None
    prompt: dict[str, Any] | None = None
    max_tool_calls: int | None = None
    top_logprobs: int | None = None
    context_management: Any = None
