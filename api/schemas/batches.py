"""OpenAI's /v1/batches body and answers, as the ``openai`` SDK's types define them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gradacc.batches.lines import ENDPOINTS

Endpoint = Literal["/v1/chat/completions", "/v1/completions", "/v1/responses"]
assert set(Endpoint.__args__) == set(ENDPOINTS)  # type: ignore[attr-defined]


class BatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_file_id: str = Field(max_length=64, description="A file uploaded with purpose batch")
    endpoint: Endpoint = Field(
        description="The batch's endpoint; its lines may name any of the three"
    )
    completion_window: str = Field(
        pattern=r"^[1-9][0-9]{0,2}h$",
        description="OpenAI's 24h, or other hours: past it the batch expires, its answers kept",
    )
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    output_expires_after: dict[str, Any] | None = None


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class BatchObject(BaseModel):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    output_file_id: str | None
    error_file_id: str | None
    errors: dict[str, Any] | None
    created_at: int
    in_progress_at: int | None
    expires_at: int
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: RequestCounts
    metadata: dict[str, str] | None


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool
