"""A job's outputs on disk (``settings.jobs_dir / job_id``): each file with its size and kind,
and the totals by top-level name. The API lists and serves them; the worker records the totals
on the job's row when they change (``jobs.outputs``), so that a poll never walks the folder."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from trainer_core.spec.outputs import (
    ADAPTER_DIR,
    CHECKPOINT_DIR,
    METRICS_FILE,
    MODEL_DIR,
    SUMMARY_FILE,
    TRAIN_LOG,
    WORKER_JOURNAL,
)

CHECKPOINT_NAME = re.compile(r"checkpoint-(\d{1,12})")  # a kept checkpoint, by its step
KINDS = {
    MODEL_DIR: "model",
    ADAPTER_DIR: "model",
    CHECKPOINT_DIR: "checkpoint",
    TRAIN_LOG: "log",
    METRICS_FILE: "metrics",
    SUMMARY_FILE: "summary",
}
HIDDEN = {WORKER_JOURNAL}  # the worker's own journal, not an output


def visible(name: str) -> bool:
    return name not in HIDDEN and not name.startswith(".") and ".tmp" not in name


def list_artifacts(root: Path) -> list[dict[str, Any]]:
    """Every regular file under the job's folder: path, bytes, kind (by its top-level name)."""
    found: list[dict[str, Any]] = []
    if not root.is_dir():
        return found
    for folder, dirs, files in os.walk(root):  # does not follow symbolic links
        dirs[:] = sorted(d for d in dirs if visible(d))
        for name in sorted(files):
            path = Path(folder, name)
            relative = path.relative_to(root).as_posix()
            top = relative.split("/", 1)[0]
            if not visible(top) or path.is_symlink() or not path.is_file():
                continue
            size = path.stat().st_size
            kind = "checkpoint" if CHECKPOINT_NAME.fullmatch(top) else KINDS.get(top, "other")
            found.append({"path": relative, "bytes": size, "kind": kind})
    return found


def outputs(root: Path) -> dict[str, int]:
    """What the job has written so far, top-level name -> bytes (a folder: its files' total)."""
    totals: dict[str, int] = {}
    for artifact in list_artifacts(root):
        top = artifact["path"].split("/", 1)[0]
        totals[top] = totals.get(top, 0) + artifact["bytes"]
    return totals
