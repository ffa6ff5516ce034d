"""The training process's side of reporting: a callback that writes to the database as it goes.

Writes are guarded by ``status = 'running'`` (or 'paused': a pause's last steps still count): once a job is cancelled or finished, nothing the
(dying) training process sends can overwrite it.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from gradacc.db import DATABASE_ERRORS, session_scope
from gradacc.jobs.records import add_event, record_epoch_metrics, record_step_metrics
from gradacc.jobs.states import LIVE_STATUSES, update_running_job
from gradacc.jobs.webhook_outbox import queue_webhook
from gradacc.outputs import outputs
from gradacc.retry import Backoff, retry
from gradacc.settings import Settings
from gradacc.tables import Job, utcnow
from trainer_core.spec.callbacks import TrainingCallback

RETRY_MAX_S = 30.0
# What the job's progress shows of its latest step record.
LIVE_KEYS = ("step", "train_loss", "samples_per_second", "eta_seconds")
Entry = dict[str, Any]  # one write that waits: JSON, so that it can wait on disk too
# Progress arrives every micro-step; the database needs it far less often. Every write wakes
# other processes (the database server), and on a small CPU box each wake-up stalls a
# multi-threaded training step: progress each second, the status every few seconds.
PROGRESS_EVERY_S = 1.0
_CREDENTIALS = re.compile(r"(\w+://)[^/@\s]+@")
_API_KEYS = re.compile(r"\bgak_[\w-]+")


def jsonable(value: Any) -> Any:
    """Plain JSON: non-finite floats become None, numpy-style scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int):
        return value
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


def describe_error(exc: BaseException, *, limit: int = 2000) -> str:
    """``Type: message``, with credentials in URLs masked; never the environment or a traceback."""
    text = _CREDENTIALS.sub(r"\1***@", f"{type(exc).__name__}: {exc}")
    text = _API_KEYS.sub("gak_***", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def without_server_paths(text: str, settings: Settings) -> str:
    """``text`` with the server's home written as ``GRADACC_HOME``: a job's error may name the
    tenant's own file (``GRADACC_HOME/files/file-…``), never where the server keeps it. The
    core names sources by the paths it was given, which the worker resolved under the home."""
    homes = {str(settings.home.resolve()), str(settings.home.absolute())}
    for home in sorted(homes, key=len, reverse=True):
        text = text.replace(home, "GRADACC_HOME")
    return text


class DatabaseCallback(TrainingCallback):
    """Writes progress, epoch metrics and events as they come.

    While the database is unreachable, training goes on: metrics and events wait, in order, and
    go out with the first later write that gets through (retries back off up to
    ``RETRY_MAX_S``); progress is dropped instead (the next one replaces it). What waits is also
    kept on disk, in ``journal`` (a JSON-lines file in the job's folder), rewritten after every
    write that failed and removed once the backlog is written: a process killed during an
    outage loses nothing, because the next attempt at the job starts by sending the journal.
    ``flush`` waits for the backlog, for the end of a run.
    """

    def __init__(self, settings: Settings, job_id: str, *, journal: Path | None = None) -> None:
        self.settings = settings
        self.job_id = job_id
        self.journal = journal
        self._last_progress = 0.0
        self._pending: list[Entry] = _read_journal(journal)
        self._journaled = bool(self._pending)  # the journal holds entries not yet written
        self._backoff = Backoff(first=1.0, cap=RETRY_MAX_S)
        self._retry_at = 0.0
        # Step records go out together, at most once per PROGRESS_EVERY_S (one write, one wake-up).
        self._steps: list[Entry] = []
        self._last_steps = 0.0

    def _submit(self, entry: Entry, *, keep: bool = True) -> None:
        if keep:
            self._pending.append(entry)
        if time.monotonic() < self._retry_at:
            if keep:
                self._save_journal()
            return
        try:
            self._drain()
            if not keep:
                self._run(entry)
        except DATABASE_ERRORS as exc:
            backoff = self._backoff.next_delay()
            self._retry_at = time.monotonic() + backoff
            self._save_journal()
            print(
                f"database unreachable ({type(exc).__name__}); {len(self._pending)} writes wait,"
                f" retry in {backoff:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    def _drain(self) -> None:
        while self._pending:
            self._run(self._pending[0])
            self._pending.pop(0)
        self._backoff.reset()
        if self._journaled and self.journal is not None:
            self.journal.unlink(missing_ok=True)  # all of it is in the database now
            self._journaled = False

    def _run(self, entry: Entry) -> None:
        with session_scope(self.settings) as session:
            _apply(session, self.job_id, entry)
            session.commit()

    def _save_journal(self) -> None:
        if self.journal is None or not self._pending:
            return
        partial = self.journal.with_suffix(".partial")
        partial.write_text("".join(json.dumps(entry) + "\n" for entry in self._pending))
        os.replace(partial, self.journal)  # all of the backlog or the previous one, never half
        self._journaled = True

    def flush(self, timeout_s: float = 300.0) -> bool:
        """Retry the waiting writes until none is left (True) or ``timeout_s`` passed (False)."""
        self._send_steps()
        try:
            retry(
                self._drain_or_save,
                errors=DATABASE_ERRORS,
                timeout_s=timeout_s,
                backoff=self._backoff,
            )
            return True
        except DATABASE_ERRORS:
            return False

    def _drain_or_save(self) -> None:
        try:
            self._drain()
        except DATABASE_ERRORS:
            self._save_journal()  # what is still waiting, on disk, before the next try
            raise

    def _update(self, event: tuple[str, str] | None = None, **values: Any) -> None:
        # An event keeps the time it happened, even if written later.
        entry: Entry = {"kind": "update", "values": values, "event": event, "at": _now()}
        self._submit(entry, keep=event is not None)

    def on_start(self, info: dict[str, Any]) -> None:
        message = (
            f"training {info.get('num_train_samples')} samples for {info.get('total_steps')} "
            f"optimizer steps, effective batch {info.get('effective_batch_size')}"
        )
        if info.get("start_step"):
            message += f", resumed at step {info['start_step']}"
        self._update(
            ("training", message),
            total_steps=info.get("total_steps"),
            step=int(info.get("start_step") or 0),
            dataset_format=info.get("dataset_format"),
        )
        plan = info.get("memory_plan")
        if plan:
            self._update(("memory_plan", str(plan["line"])))
        for warning in info.get("warnings") or []:
            self._update(("warning", str(warning)))

    def on_progress(self, progress: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - self._last_progress < PROGRESS_EVERY_S:
            return
        self._last_progress = now
        self._update(
            epoch=int(progress["epoch"]),
            step=int(progress["step"]),
            total_steps=progress.get("total_steps"),
        )

    def on_step_metrics(self, record: dict[str, Any]) -> None:
        self._steps.append(jsonable(record))
        if time.monotonic() - self._last_steps >= PROGRESS_EVERY_S:
            self._send_steps()

    def _send_steps(self) -> None:
        if self._steps:
            self._last_steps = time.monotonic()
            steps, self._steps = self._steps, []
            self._submit({"kind": "steps", "records": steps, "at": _now()})

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        self._send_steps()  # the epoch's last steps before its record
        self._submit({"kind": "epoch", "record": jsonable(record), "at": _now()})
        self._update(outputs=outputs(self.settings.jobs_dir / self.job_id))  # metrics.jsonl grew

    def on_batch_size(self, info: dict[str, Any]) -> None:
        b, k = info["micro_batch_size"], info["gradient_accumulation_steps"]
        reasons = {
            "spec": "as the spec asks",
            "probe": f"the largest that fits {info.get('budget_bytes', 0):,} bytes",
            "checkpoint": "as when the checkpoint was taken",
            "out_of_memory": f"out of memory; sizes tried: {info.get('tried')}",
        }
        message = (
            f"micro-batch {b} x K {k} = effective batch {info['effective_batch_size']} "
            f"({reasons.get(info['reason'], info['reason'])})"
        )
        self._update(("batch_size", message), micro_batch_size=b, gradient_accumulation_steps=k)

    def on_checkpoint(self, info: dict[str, Any]) -> None:
        message = f"checkpoint saved at epoch {info.get('epoch')}, step {info.get('step')}"
        sizes = outputs(self.settings.jobs_dir / self.job_id)
        self._update(("checkpoint", message), outputs=sizes)


def _now() -> str:
    return utcnow().isoformat()


def _apply(session: Session, job_id: str, entry: Entry) -> None:
    """One waiting write; guarded by ``status = 'running'`` like every write of this process."""
    at = datetime.fromisoformat(entry["at"])
    if entry["kind"] == "update":
        event = entry["event"]
        if update_running_job(session, job_id=job_id, **entry["values"]) and event is not None:
            add_event(session, job_id=job_id, kind=event[0], message=event[1], at=at)
        return
    job = session.get(Job, job_id)
    if job is None or job.status not in LIVE_STATUSES:
        return
    if entry["kind"] == "steps":
        records = entry["records"]
        record_step_metrics(
            session, job_id=job_id, records=records, metrics_events=job.api is not None
        )
        job.live_progress = {k: records[-1].get(k) for k in LIVE_KEYS}
        # A step recorded is a step done, though progress (written once a second) may lag: a
        # GRPO run records each window's step at its end, and reports no epochs.
        job.step = max(job.step or 0, int(records[-1]["step"]))
        return
    record = entry["record"]
    record_epoch_metrics(session, job_id=job_id, record=record, metrics_events=job.api is not None)
    queue_webhook(session, job_id=job_id, event="job.epoch", epoch_only=True)
    job.epoch = int(record["epoch"])
    job.step = int(record.get("optimizer_steps") or job.step)
    job.latest_metrics = record
    add_event(session, job_id=job_id, kind="epoch", message=_epoch_line(record), at=at)


def _read_journal(journal: Path | None) -> list[Entry]:
    """What an earlier attempt could not write (a line cut short by a crash is skipped)."""
    if journal is None or not journal.exists():
        return []
    entries = []
    for line in journal.read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries


def _epoch_line(record: dict[str, Any]) -> str:
    shown = ("train_loss", "eval_loss", "eval_accuracy", "eval_f1", "eval_perplexity")
    parts = [f"{k}={record[k]:.4f}" for k in shown if isinstance(record.get(k), float)]
    return f"epoch {record['epoch']} done: " + ", ".join(parts)
