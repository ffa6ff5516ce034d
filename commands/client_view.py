"""What the client commands show in a terminal (rich): job and metrics tables, the event log and
the live progress of ``--follow``, fed by the job's stream."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from commands.client import TERMINAL, Client

METRIC_COLUMNS = ("epoch", "step", "train_loss", "eval_loss", "eval_accuracy", "eval_f1",
                  "eval_perplexity", "learning_rate", "grad_norm", "samples_per_second")  # fmt: skip


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _age(created_at: int | None) -> str:
    if created_at is None:
        return ""
    seconds = int(time.time() - created_at)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _progress_text(job: dict[str, Any]) -> str:
    progress = job["progress"]
    text = f"step {progress['step']}/{progress.get('total_steps') or '?'}"
    if progress.get("train_loss") is not None:
        text += f" loss {progress['train_loss']:.4g}"
    return text


def job_table(jobs: list[dict[str, Any]], *, detail: bool = False) -> Table:
    table = Table("id", "status", "backend", "K", "eff. batch", "progress", "age")
    for job in jobs:
        spec = job["spec"]
        table.add_row(job["id"], job["status"], spec.get("backend", ""),
                      str(spec.get("gradient_accumulation_steps", "")),
                      str(job["effective_batch_size"]), _progress_text(job),
                      _age(job.get("created_at")))  # fmt: skip
    if detail and jobs:
        job = jobs[0]
        if job.get("error"):
            table.caption = f"error ({job['error']['code']}): {job['error']['message']}"
        elif job.get("metrics"):
            shown = {k: _cell(v) for k, v in job["metrics"].items() if k in METRIC_COLUMNS}
            table.caption = "latest epoch: " + ", ".join(f"{k}={v}" for k, v in shown.items())
    return table


def metrics_table(records: list[dict[str, Any]]) -> Table:
    present = [c for c in METRIC_COLUMNS if any(c in r for r in records)]
    table = Table(*present)
    for record in records:
        table.add_row(*(_cell(record.get(c)) for c in present))
    return table


def print_events(console: Console, events: list[dict[str, Any]]) -> None:
    for event in events:
        moment = datetime.fromtimestamp(event["created_at"], UTC).strftime("%H:%M:%S")
        console.print(f"{moment}  {event['kind']:<12} {event['message']}", highlight=False)


def follow_job(client: Client, job: dict[str, Any], *, quiet: bool = False) -> dict[str, Any]:
    """A progress bar (epoch, step, loss, ETA) fed by the stream until the final status; the
    final job object."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[detail]}"))  # fmt: skip
    with Progress(*columns, disable=quiet, console=Console(stderr=True)) as bar:
        task = bar.add_task(job["status"], total=job["progress"]["total_steps"], detail="")
        for kind, data in client.stream(job["id"]):
            if kind == "job":
                job = data
                progress = data["progress"]
                bar.update(task, total=progress["total_steps"], completed=progress["step"],
                           description=f"{data['status']} epoch {progress['epoch']}")  # fmt: skip
            elif kind == "step":
                eta = data.get("eta_seconds")
                detail = f"loss {data['train_loss']:.4g}" + (f"  ETA {eta:.0f}s" if eta else "")
                bar.update(task, completed=data["step"], detail=detail)
            if job["status"] in TERMINAL:
                break
    return job
