"""What the client commands show in a terminal (rich): job and metrics tables, the event log and
the live progress of ``--follow``, fed by the job's stream."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from commands.client import TERMINAL, Client

METRIC_COLUMNS = (
    "epoch",
    "step",
    "train_loss",
    "eval_loss",
    "eval_accuracy",
    "eval_f1",
    "eval_perplexity",
    "learning_rate",
    "grad_norm",
    "samples_per_second",
)


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
    text = f"{progress['step']}/{progress.get('total_steps') or '?'}"
    if progress.get("train_loss") is not None:
        text += f" loss {progress['train_loss']:.4g}"
    return text


def _name(job: dict[str, Any]) -> str:
    """The name given at POST and a fine-tuning job's suffix, whichever it has."""
    return " / ".join(v for v in (job.get("name"), job.get("suffix")) if v)


WIDE = 120  # narrower terminals leave out the backend and bxK columns (``status`` shows them)


def job_table(jobs: list[dict[str, Any]], *, detail: bool = False, width: int = WIDE) -> Table:
    """Ids whole (never cut: jobs created together share their first characters); the other
    columns wrap to fit ``width``."""
    wide = width >= WIDE
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("id", no_wrap=True, min_width=max((len(j["id"]) for j in jobs), default=2))
    table.add_column("name", overflow="fold")
    table.add_column("model", overflow="fold")
    table.add_column("status", no_wrap=True)
    if wide:
        table.add_column("backend", no_wrap=True)
        table.add_column("bxK", no_wrap=True)
    table.add_column("progress", overflow="fold")
    table.add_column("age", no_wrap=True)
    for job in jobs:
        spec = job["spec"]
        b = job.get("micro_batch_size") or spec.get("per_device_train_batch_size", "")
        k = job.get("gradient_accumulation_steps") or spec.get("gradient_accumulation_steps", "")
        batch = [spec.get("backend", ""), f"{b}x{k}"] if wide else []
        table.add_row(
            job["id"],
            _name(job),
            spec.get("model", ""),
            job["status"],
            *batch,
            _progress_text(job),
            _age(job.get("created_at")),
        )
    if detail and jobs:
        table.caption = _caption(jobs[0])
        table.caption_justify = "left"
    return table


def _caption(job: dict[str, Any]) -> str:
    """``status``'s lines under the table: what the user gave, the model it made, the latest
    epoch's metrics or the error."""
    spec = job["spec"]
    k = job.get("gradient_accumulation_steps") or spec.get("gradient_accumulation_steps")
    lines = [f"backend {spec.get('backend')}, K {k}, effective batch {job['effective_batch_size']}"]
    if job.get("metadata"):
        lines.append("metadata: " + ", ".join(f"{k}={v}" for k, v in job["metadata"].items()))
    if job.get("fine_tuned_model"):
        lines.append(f"fine_tuned_model: {job['fine_tuned_model']}")
    if job.get("error"):
        lines.append(f"error ({job['error']['code']}): {job['error']['message']}")
    elif job.get("metrics"):
        shown = {k: _cell(v) for k, v in job["metrics"].items() if k in METRIC_COLUMNS}
        lines.append("latest epoch: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    return "\n".join(lines)


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
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
    )
    with Progress(*columns, disable=quiet, console=Console(stderr=True)) as bar:
        task = bar.add_task(job["status"], total=job["progress"]["total_steps"], detail="")
        for kind, data in client.stream(job["id"]):
            if kind == "job":
                job = data
                progress = data["progress"]
                bar.update(
                    task,
                    total=progress["total_steps"],
                    completed=progress["step"],
                    description=f"{data['status']} epoch {progress['epoch']}",
                )
            elif kind == "step":
                eta = data.get("eta_seconds")
                detail = f"loss {data['train_loss']:.4g}" + (f"  ETA {eta:.0f}s" if eta else "")
                bar.update(task, completed=data["step"], detail=detail)
            if job["status"] in TERMINAL:
                break
    return job
