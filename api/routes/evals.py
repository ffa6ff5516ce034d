"""OpenAI's /v1/evals: evals on this server's graders, run against any model it serves or routes
upstream, by the workers, item by item (docs/openai.md, Evals)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query

from api.deps import ReadSessionDep, SessionDep, SettingsDep, TenantDep
from api.schemas.evals import (
    EvalCreate,
    EvalDeleted,
    EvalList,
    EvalObject,
    EvalUpdate,
    OutputItem,
    OutputItemList,
    RunCreate,
    RunDeleted,
    RunList,
    RunObject,
)
from api.schemas.jobs import ErrorResponse
from api.services import evals as services

router = APIRouter(prefix="/evals", tags=["evals"])
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404)
}
After = Query(default=None, max_length=80)
Limit = Query(default=20, ge=1, le=100)
Order = Literal["asc", "desc"]


def _page(data: list[Any], more: bool) -> dict[str, Any]:
    return {
        "data": data,
        "has_more": more,
        "first_id": data[0].id if data else None,
        "last_id": data[-1].id if data else None,
    }


@router.post("", response_model=EvalObject, responses=ERRORS, summary="Create an eval")
def create_eval(
    body: EvalCreate, session: SessionDep, settings: SettingsDep, tenant: TenantDep
) -> EvalObject:
    """`data_source_config`: `custom` (`item_schema`, a JSON schema each item must fit) or
    `stored_completions`. `testing_criteria`: graders as `graders/run` takes them, each named;
    `pass_threshold` where OpenAI's criteria carry one. A model grader may name any model you
    can chat with here (a base, `ft:…`, a checkpoint, an upstream route)."""
    return services.create_eval(session, settings, body, tenant)


@router.get("", response_model=EvalList, responses=ERRORS, summary="List your evals")
def list_evals(
    session: ReadSessionDep,
    tenant: TenantDep,
    after: str | None = After,
    limit: int = Limit,
    order: Order = "asc",
    order_by: Literal["created_at", "updated_at"] = "created_at",
) -> EvalList:
    """Oldest first unless `order=desc`; page with `after` = `last_id`."""
    data, more = services.list_evals(session, tenant, after=after, limit=limit, order=order)
    return EvalList(**_page(data, more))


@router.get("/{eval_id}", response_model=EvalObject, responses=ERRORS, summary="Retrieve an eval")
def retrieve_eval(eval_id: str, session: ReadSessionDep, tenant: TenantDep) -> EvalObject:
    """Its config (the items' JSON schema) and criteria; another tenant's is a 404."""
    return services.eval_view(services.get_eval(session, eval_id, tenant))


@router.post("/{eval_id}", response_model=EvalObject, responses=ERRORS, summary="Update an eval")
def update_eval(
    eval_id: str, body: EvalUpdate, session: SessionDep, tenant: TenantDep
) -> EvalObject:
    """Its `name` and `metadata`."""
    return services.update_eval(session, eval_id, body, tenant)


@router.delete("/{eval_id}", response_model=EvalDeleted, responses=ERRORS, summary="Delete an eval")
def delete_eval(eval_id: str, session: SessionDep, tenant: TenantDep) -> EvalDeleted:
    """With its runs and their output items."""
    services.delete_eval(session, eval_id, tenant)
    return EvalDeleted(deleted=True, eval_id=eval_id)


@router.post("/{eval_id}/runs", response_model=RunObject, responses=ERRORS, summary="Create a run")
def create_run(
    eval_id: str, body: RunCreate, session: SessionDep, settings: SettingsDep, tenant: TenantDep
) -> RunObject:
    """`data_source`: `completions` or `responses` (`model`, `input_messages` as a `template`
    or an `item_reference`, `sampling_params`) to sample a model on each item, or `jsonl`
    (items carrying their `sample`). Items inline (`file_content`) or in a file (`file_id`,
    purpose `evals`, or a `fine-tune` chat file). Queued for the workers: `queued` →
    `in_progress` → `completed` (`canceled`, `failed`); `result_counts` grows as items are
    graded."""
    return services.create_run(session, settings, eval_id, body, tenant)


@router.get("/{eval_id}/runs", response_model=RunList, responses=ERRORS, summary="List runs")
def list_runs(
    eval_id: str,
    session: ReadSessionDep,
    tenant: TenantDep,
    after: str | None = After,
    limit: int = Limit,
    order: Order = "asc",
    status: Literal["queued", "in_progress", "completed", "canceled", "failed"] | None = None,
) -> RunList:
    """Oldest first unless `order=desc`; `status` filters."""
    data, more = services.list_runs(
        session, eval_id, tenant, after=after, limit=limit, order=order, status=status
    )
    return RunList(**_page(data, more))


@router.get(
    "/{eval_id}/runs/{run_id}", response_model=RunObject, responses=ERRORS, summary="Retrieve a run"
)
def retrieve_run(
    eval_id: str, run_id: str, session: ReadSessionDep, tenant: TenantDep
) -> RunObject:
    """Its status, `result_counts` (passed + failed + errored of total: its progress),
    `per_testing_criteria_results` and `per_model_usage` (tokens, the graders' models
    included)."""
    run, found = services.get_run(session, eval_id, run_id, tenant)
    return services.run_view(session, run, found)


@router.post(
    "/{eval_id}/runs/{run_id}/cancel",
    response_model=RunObject,
    responses=ERRORS,
    summary="Cancel a run",
)
def cancel_run(eval_id: str, run_id: str, session: SessionDep, tenant: TenantDep) -> RunObject:
    """`canceling` until its worker stops before its next item (`canceled`); items graded stay."""
    return services.cancel_run(session, eval_id, run_id, tenant)


@router.delete(
    "/{eval_id}/runs/{run_id}", response_model=RunDeleted, responses=ERRORS, summary="Delete a run"
)
def delete_run(eval_id: str, run_id: str, session: SessionDep, tenant: TenantDep) -> RunDeleted:
    """With its output items (a worker running it finds it gone and stops)."""
    services.delete_run(session, eval_id, run_id, tenant)
    return RunDeleted(deleted=True, run_id=run_id)


@router.get(
    "/{eval_id}/runs/{run_id}/output_items",
    response_model=OutputItemList,
    responses=ERRORS,
    summary="List a run's output items",
)
def list_output_items(
    eval_id: str,
    run_id: str,
    session: ReadSessionDep,
    tenant: TenantDep,
    after: str | None = After,
    limit: int = Limit,
    order: Order = "asc",
    status: Literal["pass", "fail", "error"] | None = None,
) -> OutputItemList:
    """Each item graded so far: the item, its `sample` (input, output, usage, error) and its
    `results` (score and passed, per criterion)."""
    data, more = services.list_items(
        session, eval_id, run_id, tenant, after=after, limit=limit, order=order, status=status
    )
    return OutputItemList(**_page(data, more))


@router.get(
    "/{eval_id}/runs/{run_id}/output_items/{output_item_id}",
    response_model=OutputItem,
    responses=ERRORS,
    summary="Retrieve an output item",
)
def retrieve_output_item(
    eval_id: str, run_id: str, output_item_id: str, session: ReadSessionDep, tenant: TenantDep
) -> OutputItem:
    """One item: its sample and its results per criterion."""
    return services.get_item(session, eval_id, run_id, output_item_id, tenant)
