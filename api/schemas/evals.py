"""OpenAI's /v1/evals bodies and answers, as the ``openai`` SDK's types define them. The
structures inside (a data source config, testing criteria, a run's data source) are checked by
``gradacc.evals`` so that each refusal names its field the way the SDK's caller wrote it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Metadata = dict[str, str] | None


class EvalCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data_source_config: dict[str, Any] = Field(
        description="custom (with item_schema) or stored_completions"
    )
    testing_criteria: list[Any] = Field(
        description="graders: string_check, text_similarity, python, score_model, label_model, "
        "multi; each with a unique name"
    )
    name: str | None = Field(default=None, max_length=256)
    metadata: Metadata = Field(default=None, max_length=16)


class EvalUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, max_length=256)
    metadata: Metadata = Field(default=None, max_length=16)


class EvalObject(BaseModel):
    id: str
    object: Literal["eval"] = "eval"
    name: str
    created_at: int
    data_source_config: dict[str, Any]
    testing_criteria: list[dict[str, Any]]
    metadata: Metadata


class EvalList(BaseModel):
    object: Literal["list"] = "list"
    data: list[EvalObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class EvalDeleted(BaseModel):
    object: Literal["eval.deleted"] = "eval.deleted"
    deleted: bool
    eval_id: str


class RunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data_source: dict[str, Any] = Field(
        description="jsonl (items with their samples), or completions / responses (a model "
        "sampled on each item's messages)"
    )
    name: str | None = Field(default=None, max_length=256)
    metadata: Metadata = Field(default=None, max_length=16)


class ResultCounts(BaseModel):
    total: int
    passed: int
    failed: int
    errored: int


class CriterionResult(BaseModel):
    testing_criteria: str
    passed: int
    failed: int


class ModelUsage(BaseModel):
    model_name: str
    invocation_count: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int


class RunObject(BaseModel):
    id: str
    object: Literal["eval.run"] = "eval.run"
    eval_id: str
    name: str
    model: str | None
    status: str
    created_at: int
    data_source: dict[str, Any]
    error: dict[str, Any] | None
    metadata: Metadata
    report_url: str
    result_counts: ResultCounts
    per_testing_criteria_results: list[CriterionResult]
    per_model_usage: list[ModelUsage]


class RunList(BaseModel):
    object: Literal["list"] = "list"
    data: list[RunObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class RunDeleted(BaseModel):
    object: Literal["eval.run.deleted"] = "eval.run.deleted"
    deleted: bool
    run_id: str


class OutputItem(BaseModel):
    id: str
    object: Literal["eval.run.output_item"] = "eval.run.output_item"
    run_id: str
    eval_id: str
    created_at: int
    status: str
    datasource_item_id: int
    datasource_item: Any
    results: list[dict[str, Any]]
    sample: dict[str, Any]


class OutputItemList(BaseModel):
    object: Literal["list"] = "list"
    data: list[OutputItem]
    first_id: str | None
    last_id: str | None
    has_more: bool
