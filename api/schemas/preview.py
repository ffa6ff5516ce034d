"""POST /v1/files/{id}/preview: the job's data fields asked about, and what they would train."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_PREVIEW_ROWS = 50  # trainer_core.preview.MAX_ROWS


class PreviewRequest(BaseModel):
    """A model and the data fields of the job (``JobSpec``'s names and defaults); the file is the
    dataset. Checked as a job's spec is: a wrong field is a 4xx naming it."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="As a job's: builtin:tiny-chat, file-…, ft:…, a hub id")
    rows: int = Field(default=5, ge=1, le=MAX_PREVIEW_ROWS, description="The first N rows")
    chat_template: str | None = None
    dataset_format: Literal["auto", "text", "messages", "prompt-completion"] = "auto"
    messages_column: str | None = None
    prompt_column: str | None = None
    completion_column: str | None = None
    text_column: str | None = None
    max_seq_length: int | None = None
    assistant_only_loss: bool = True
    completion_only_loss: bool = True
    train_empty_reasoning: bool = True


class PreviewToken(BaseModel):
    text: str
    trained: bool = Field(description="Its prediction from the tokens before it is in the loss")


class PreviewRow(BaseModel):
    index: int = Field(description="The row's position in the file, from 0")
    tokens: list[PreviewToken]
    trained: int = Field(description="Trained tokens: what the trainer divides the loss by")
    total: int = Field(description="Tokens after truncation at max_seq_length")
    warnings: list[str]


class PreviewRead(BaseModel):
    format: str
    max_length: int = Field(description="max_seq_length, at most the model's context")
    rows: list[PreviewRow]
