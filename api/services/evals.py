"""/v1/evals: an eval is made from its checked config and criteria; a run is checked (its model
the tenant's, its items fitting the eval's schema) and queued for the workers' item runners
(``worker.consumer.item_runner``), then read back with its counts so far, listed, canceled,
deleted; its output items read as they are kept. Another tenant's eval or run is a 404."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.schemas.evals import (
    EvalCreate,
    EvalObject,
    EvalUpdate,
    OutputItem,
    RunCreate,
    RunObject,
)
from gradacc import leases, run_items
from gradacc.errors import InvalidRequest, ObjectNotFound
from gradacc.evals.config import parse_config
from gradacc.evals.criteria import as_sent, parse_criteria
from gradacc.evals.results import summary
from gradacc.evals.sources import check_items, file_rows, parse_run_source
from gradacc.ids import time_ordered_id
from gradacc.serving.ask import checked_target
from gradacc.settings import Settings
from gradacc.sources.files import local_source
from gradacc.sources.graders import model_graders
from gradacc.tables import Eval, EvalRun, File, FilePurpose, RunItem, RunStatus

ITEM_FILES = (FilePurpose.EVALS, FilePurpose.FINE_TUNE)


def eval_view(found: Eval) -> EvalObject:
    return EvalObject(
        id=found.id,
        name=found.name,
        created_at=int(found.created_at.timestamp()),
        data_source_config=found.data_source_config,
        testing_criteria=found.testing_criteria,
        metadata=found.metadata_,
    )


def create_eval(session: Session, settings: Settings, body: EvalCreate, tenant: str) -> EvalObject:
    config = parse_config(body.data_source_config)
    criteria = parse_criteria(body.testing_criteria)
    for i, criterion in enumerate(criteria):
        for where, grader in model_graders(criterion.grader, f"testing_criteria[{i}]"):
            checked_target(
                session, settings, model=grader.model, tenant=tenant, param=f"{where}.model"
            )
    found = Eval(
        id=time_ordered_id("eval_"),
        tenant=tenant,
        name=body.name or "eval",
        data_source_config=config,
        testing_criteria=[as_sent(c) for c in criteria],
        metadata_=body.metadata,
    )
    session.add(found)
    session.commit()
    return eval_view(found)


def get_eval(session: Session, eval_id: str, tenant: str) -> Eval:
    found = session.get(Eval, eval_id)
    if found is None or found.tenant != tenant:
        raise ObjectNotFound("eval", eval_id, param="eval_id")
    return found


def update_eval(session: Session, eval_id: str, body: EvalUpdate, tenant: str) -> EvalObject:
    found = get_eval(session, eval_id, tenant)
    if body.name is not None:
        found.name = body.name
    if body.metadata is not None:
        found.metadata_ = body.metadata
    session.commit()
    return eval_view(found)


def delete_eval(session: Session, eval_id: str, tenant: str) -> None:
    """The eval, its runs and their items (a running run's worker finds it gone and stops)."""
    found = get_eval(session, eval_id, tenant)
    runs = list(session.scalars(select(EvalRun.id).where(EvalRun.eval_id == eval_id)))
    run_items.forget(session, runs)
    for run in session.scalars(select(EvalRun).where(EvalRun.eval_id == eval_id)):
        session.delete(run)
    session.delete(found)
    session.commit()


def list_evals(
    session: Session, tenant: str, *, after: str | None, limit: int, order: str
) -> tuple[list[EvalObject], bool]:
    query = select(Eval).where(Eval.tenant == tenant)
    found = _page(session, query, Eval.id, after=after, limit=limit, order=order)
    return [eval_view(e) for e in found[:limit]], len(found) > limit


def _page(
    session: Session, query: Any, key: Any, *, after: str | None, limit: int, order: str
) -> list[Any]:
    if after is not None:
        query = query.where(key > after if order == "asc" else key < after)
    ordered = key.asc() if order == "asc" else key.desc()
    return list(session.scalars(query.order_by(ordered).limit(limit + 1)))


# Runs.


def run_view(session: Session, run: EvalRun, found: Eval) -> RunObject:
    kept = [(r.status, r.record) for r in run_items.kept(session, run.id)]
    names = [str(c["name"]) for c in found.testing_criteria]
    counts = summary(run.total, kept, names)
    return RunObject(
        id=run.id,
        eval_id=run.eval_id,
        name=run.name,
        model=run.model,
        status=run.status,
        created_at=int(run.created_at.timestamp()),
        data_source=run.data_source,
        error=run.error,
        metadata=run.metadata_,
        report_url=f"/evals?eval={run.eval_id}&run={run.id}",
        **counts,
    )


def create_run(
    session: Session, settings: Settings, eval_id: str, body: RunCreate, tenant: str
) -> RunObject:
    found = get_eval(session, eval_id, tenant)
    plan = parse_run_source(body.data_source)
    if plan.model is not None:
        checked_target(
            session, settings, model=plan.model, tenant=tenant, param="data_source.model"
        )
    if plan.inline is not None:
        rows = plan.inline
        check_items(found.data_source_config, rows, "data_source.source.content")
    else:
        assert plan.file_id is not None
        rows = _file_items(session, settings, plan.file_id, tenant)
        check_items(found.data_source_config, rows, "data_source.source.id")
    run = EvalRun(
        id=time_ordered_id("evalrun_"),
        tenant=tenant,
        eval_id=found.id,
        name=body.name or f"{plan.model or 'samples'} run",
        model=plan.model,
        data_source=body.data_source,
        status=RunStatus.QUEUED,
        total=len(rows),
        metadata_=body.metadata,
    )
    session.add(run)
    session.commit()
    return run_view(session, run, found)


def _file_items(session: Session, settings: Settings, file_id: str, tenant: str) -> list[Any]:
    file = session.get(File, file_id)
    if file is None or file.tenant != tenant:
        raise ObjectNotFound("file", file_id, param="data_source.source.id")
    if file.purpose not in ITEM_FILES:
        raise InvalidRequest(
            f"{file_id} has purpose {file.purpose!r}; an eval's items are a file of purpose "
            "'evals' (or a 'fine-tune' chat file)",
            param="data_source.source.id",
        )
    text = local_source(settings, file).read_text(encoding="utf-8", errors="replace")
    try:
        return file_rows(text)
    except ValueError as exc:
        raise InvalidRequest(f"{file_id}: {exc}", param="data_source.source.id") from None


def get_run(session: Session, eval_id: str, run_id: str, tenant: str) -> tuple[EvalRun, Eval]:
    found = get_eval(session, eval_id, tenant)
    run = session.get(EvalRun, run_id)
    if run is None or run.eval_id != found.id:
        raise ObjectNotFound("run", run_id, param="run_id")
    return run, found


def cancel_run(session: Session, eval_id: str, run_id: str, tenant: str) -> RunObject:
    """A queued run no worker holds ends now; a running one goes to ``canceling`` until its
    worker stops before its next item. Its items kept stay. An ended run is as it was."""
    run, found = get_run(session, eval_id, run_id, tenant)
    leases.cancel(session, EvalRun, run.id, running=(RunStatus.QUEUED, RunStatus.IN_PROGRESS))
    session.refresh(run)
    return run_view(session, run, found)


def delete_run(session: Session, eval_id: str, run_id: str, tenant: str) -> None:
    run, _ = get_run(session, eval_id, run_id, tenant)
    run_items.forget(session, [run.id])
    session.delete(run)
    session.commit()


def list_runs(
    session: Session,
    eval_id: str,
    tenant: str,
    *,
    after: str | None,
    limit: int,
    order: str,
    status: str | None,
) -> tuple[list[RunObject], bool]:
    found = get_eval(session, eval_id, tenant)
    query = select(EvalRun).where(EvalRun.eval_id == found.id)
    if status is not None:
        query = query.where(EvalRun.status == status)
    runs = _page(session, query, EvalRun.id, after=after, limit=limit, order=order)
    return [run_view(session, r, found) for r in runs[:limit]], len(runs) > limit


# Output items.


def item_id(run_id: str, index: int) -> str:
    return f"outputitem_{run_id.removeprefix('evalrun_')}_{index}"


def item_view(run: EvalRun, row: RunItem) -> OutputItem:
    record = row.record
    return OutputItem(
        id=item_id(run.id, row.item),
        run_id=run.id,
        eval_id=run.eval_id,
        created_at=int(record.get("created_at", 0)),
        status=row.status,
        datasource_item_id=row.item,
        datasource_item=record["datasource_item"],
        results=record["results"],
        sample=record["sample"],
    )


def list_items(
    session: Session,
    eval_id: str,
    run_id: str,
    tenant: str,
    *,
    after: str | None,
    limit: int,
    order: str,
    status: str | None,
) -> tuple[list[OutputItem], bool]:
    run, _ = get_run(session, eval_id, run_id, tenant)
    query = select(RunItem).where(RunItem.run_id == run.id)
    if status is not None:
        query = query.where(RunItem.status == status)
    if after is not None:
        start = _index_of(after, run.id)
        query = query.where(RunItem.item > start if order == "asc" else RunItem.item < start)
    ordered = RunItem.item.asc() if order == "asc" else RunItem.item.desc()
    rows = list(session.scalars(query.order_by(ordered).limit(limit + 1)))
    return [item_view(run, r) for r in rows[:limit]], len(rows) > limit


def _index_of(output_item_id: str, run_id: str) -> int:
    prefix = item_id(run_id, 0).removesuffix("0")
    number = output_item_id.removeprefix(prefix)
    if not output_item_id.startswith(prefix) or not number.isdigit():
        raise ObjectNotFound("output item", output_item_id, param="output_item_id")
    return int(number)


def get_item(
    session: Session, eval_id: str, run_id: str, output_item_id: str, tenant: str
) -> OutputItem:
    run, _ = get_run(session, eval_id, run_id, tenant)
    row = session.get(RunItem, (run.id, _index_of(output_item_id, run.id)))
    if row is None:
        raise ObjectNotFound("output item", output_item_id, param="output_item_id")
    return item_view(run, row)
