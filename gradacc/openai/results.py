"""A fine-tuning job's results file: its step metrics as the CSV OpenAI writes (purpose
``fine-tune-results``, read with ``files.content``), stored as the tenant's file in the same
transaction that marks the job succeeded, so a client that sees "succeeded" finds the file."""

from __future__ import annotations

import csv
import hashlib
import io
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradacc.openai.names import result_columns
from gradacc.settings import Settings
from gradacc.sources.files import file_dir, new_file_id
from gradacc.tables import EpochMetric, File, FilePurpose, Job, StepMetric

RESULTS_NAME = "step_metrics.csv"


def results_csv(steps: list[dict[str, Any]], epochs: list[dict[str, Any]]) -> str:
    """One row per step record; an epoch's evaluation fills the row of the step it ended at (a
    row of its own where no step record fell there, as in the metrics events)."""
    at_step = {
        int(e["optimizer_steps"]): e
        for e in epochs
        if "optimizer_steps" in e and e.get("eval_loss") is not None
    }
    by_step = {int(s["step"]): s for s in steps}
    by_step |= {step: {"step": step} for step in at_step if step not in by_step}
    columns = result_columns(steps)
    evaluation = [key for key in columns if key.startswith("eval_")]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns.values())
    for step, record in sorted(by_step.items()):
        evaluated = record if "eval_loss" in record else at_step.get(step, {})
        # a reinforcement job's evaluation is in its step record already: kept as it is
        row = record | {key: evaluated.get(key) for key in evaluation if key not in record}
        writer.writerow([step, *(_cell(row.get(key)) for key in list(columns)[1:])])
    return out.getvalue()


def _trained_tokens(job: Job, epochs: list[dict[str, Any]]) -> int | None:
    """What the loss averaged over: trained tokens. A dpo job averages over pairs, and counts
    its trained tokens apart (``train_tokens``) where the core records them; else unknown."""
    if job.spec.get("method") == "dpo":
        counted = [e["train_tokens"] for e in epochs if e.get("train_tokens") is not None]
        return sum(int(n) for n in counted) if counted else None
    return sum(int(e.get("train_items") or 0) for e in epochs)


def _cell(value: Any) -> str:
    return "" if value is None else repr(float(value))


def write_results(session: Session, settings: Settings, *, job: Job) -> None:
    """Write the file and record it (and the trained tokens) on the job. Does not commit."""
    if job.fine_tuning is None or job.fine_tuning.get("result_files"):
        return
    query = select(StepMetric.record).where(StepMetric.job_id == job.id)
    steps = list(session.scalars(query.order_by(StepMetric.step)))
    query_epochs = select(EpochMetric.record).where(EpochMetric.job_id == job.id)
    epochs = list(session.scalars(query_epochs.order_by(EpochMetric.epoch)))
    data = results_csv(steps, epochs).encode()
    file_id = new_file_id()
    folder = file_dir(settings, file_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULTS_NAME).write_bytes(data)
    session.add(
        File(
            id=file_id,
            tenant=job.tenant,
            purpose=FilePurpose.FINE_TUNE_RESULTS,
            filename=RESULTS_NAME,
            stored_name=RESULTS_NAME,
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            details={
                "format": "csv",
                "rows": len(steps),
                "columns": list(result_columns(steps).values()),
            },
        )
    )
    trained = _trained_tokens(job, epochs)
    job.fine_tuning = {**job.fine_tuning, "result_files": [file_id], "trained_tokens": trained}
