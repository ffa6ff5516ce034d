"""``GET /v1/jobs/{id}/artifacts/model?merged=true``: a LoRA job's adapters merged into their
base, a whole model that ``from_pretrained`` and vLLM load (docs/service.md, "Merged export").

The merge runs once per job, in a child process (``python -m trainer_core merge``): it needs torch
and the memory of the base twice over, neither of which the API holds; the request's thread waits
for it (a plain ``def`` route: FastAPI's thread pool, so other requests go on). The result is kept
as the job's ``.merged-model/`` (a dot name: hidden from /artifacts), written whole and renamed,
under a file lock so that two requests (or two API processes) merge once. A job that is not LoRA,
or that merged at training (``merge_lora``), has a whole ``model/`` already: that is the answer.
"""

from __future__ import annotations

import fcntl
import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.orm import Session

from api.services.jobs import get_job
from gradacc.errors import ArtifactNotFound, NotTrained
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.tables import JobStatus
from trainer_core.spec.outputs import MODEL_DIR

log = logging.getLogger(__name__)
MERGED_DIR = ".merged-model"
MERGE_TIMEOUT_S = 3600.0  # a large base on a slow disk; a child past it is killed


def merged_model(session: Session, settings: Settings, *, job_id: str, tenant: str) -> Path:
    """The folder to send: ``model/`` when it is whole, else the merge, made once."""
    job = get_job(session, job_id=job_id, tenant=tenant)
    root = settings.jobs_dir / job.id
    whole, merged = root / MODEL_DIR, root / MERGED_DIR
    if (whole / "config.json").is_file() and not whole.is_symlink():
        return whole
    if job.spec.get("lora") is None:
        raise ArtifactNotFound(MODEL_DIR)
    if job.status != JobStatus.SUCCEEDED:
        raise NotTrained(f"job {job.id} is {job.status}: its model is merged once it succeeds")
    if merged.is_dir():
        return merged
    try:
        view = fine_tuned.model_folder(settings, job, None)
    except fine_tuned.ModelUnavailable:
        raise ArtifactNotFound(MODEL_DIR) from None
    causal = job.spec.get("task") == "causal-lm"
    session.close()  # the merge may take minutes: its database connection goes back first
    with _locked(root / f"{MERGED_DIR}.lock"):
        if not merged.is_dir():  # another request merged it while this one waited
            _merge(view, merged, classifier=not causal)
    return merged


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _merge(view: Path, into: Path, *, classifier: bool) -> None:
    argv = [sys.executable, "-m", "trainer_core", "merge", str(view), "--output-dir", str(into)]
    if classifier:
        argv.append("--classifier")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=MERGE_TIMEOUT_S)
    if done.returncode != 0 or not into.is_dir():
        log.error("merging %s failed (%s): %s", view, done.returncode, done.stderr[-4000:])
        raise RuntimeError(f"merging {view.parent.name}'s adapters into their base failed")
