"""/v1/distillations: a teacher model sampled on a prompt file into a chat training file."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class DistillationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    teacher: str = Field(
        min_length=1,
        max_length=512,
        description="Any model you can chat with here: a base, ft:…, a checkpoint, an alias, "
        "an upstream route (the old hosted model)",
    )
    prompt_file: str = Field(
        max_length=64,
        description="A JSONL file (purpose fine-tune or evals): {'messages': [...]} rows (a "
        "final assistant turn is answered again) or {'prompt': '...'}",
    )
    sampling: dict[str, Any] | None = Field(
        default=None, description="temperature, top_p, seed, max_completion_tokens"
    )
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


class Progress(BaseModel):
    total: int
    done: int
    failed: int


class TokenUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class DistillationObject(BaseModel):
    id: str
    object: Literal["distillation"] = "distillation"
    teacher: str
    prompt_file: str
    sampling: dict[str, Any]
    status: str
    progress: Progress
    usage: TokenUsage = Field(description="the tokens the teacher spent so far")
    output_file_id: str | None = Field(description="the training file, once it has ended")
    row_errors: list[dict[str, Any]] = Field(description="prompts the teacher refused, by line")
    error: dict[str, Any] | None
    created_at: int
    ended_at: int | None
    metadata: dict[str, str] | None


class DistillationList(BaseModel):
    object: Literal["list"] = "list"
    data: list[DistillationObject]
    first_id: str | None
    last_id: str | None
    has_more: bool
