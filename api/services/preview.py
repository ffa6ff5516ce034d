"""POST /v1/files/{id}/preview: the job's data fields checked as a spec, the file ids resolved to
their bytes, and the core's preview run in a child process (``python -m trainer_core.preview``):
the API loads no tokenizer, and a slow or failing template costs the child, not the server."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from api.schemas.preview import PreviewRead, PreviewRequest
from api.services.files import get_file
from gradacc.errors import InvalidRequest, TooManyPreviews
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.sources.files import check_file_refs, file_refs, local_source
from gradacc.sources.limits import check_spec_allowed
from gradacc.tables import File, FilePurpose
from trainer_core.spec.job import JobSpec
from trainer_core.spec.sources import classify_source

PREVIEW_TIMEOUT_S = 120.0  # a hub model's first load is the slow part
BAD_PREVIEW = 2  # trainer_core.preview's exit status for a problem with the request
_running: dict[int, threading.BoundedSemaphore] = {}  # the cap, per configured limit
_lock = threading.Lock()


def _slots(limit: int) -> threading.BoundedSemaphore:
    with _lock:
        return _running.setdefault(limit, threading.BoundedSemaphore(limit))


def preview_file(
    session: Session, settings: Settings, *, file_id: str, tenant: str, body: PreviewRequest
) -> PreviewRead:
    file = get_file(session, file_id=file_id, tenant=tenant)
    if file.purpose == FilePurpose.MODEL:
        raise InvalidRequest(f"{file_id} is a model; preview a dataset", param="file_id")
    spec = _spec(body, file_id)
    # The same limits as a job's: a model path outside the data roots is refused here too.
    check_spec_allowed(spec, settings)
    check_file_refs(session, spec=spec, tenant=tenant)
    resolved = _resolved(session, settings, spec, tenant)
    slots = _slots(settings.max_previews)
    if not slots.acquire(blocking=False):  # each preview is a process that imports transformers
        raise TooManyPreviews(settings.max_previews)
    try:
        return PreviewRead.model_validate(_run(resolved, body.rows))
    finally:
        slots.release()


def _spec(body: PreviewRequest, file_id: str) -> JobSpec:
    fields = body.model_dump(exclude_none=True, exclude={"rows"})
    try:
        return JobSpec(task="causal-lm", dataset=file_id, **fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = str(error["loc"][0]) if error["loc"] else None
        raise InvalidRequest(_unprefixed(error["msg"].removeprefix("Value error, "), param),
                             param=param) from None  # fmt: skip


def _unprefixed(message: str, param: str | None) -> str:
    return message.removeprefix(f"{param}: ") if param else message


def _resolved(session: Session, settings: Settings, spec: JobSpec, tenant: str) -> dict[str, Any]:
    """The spec as the training child gets it: each ``file-…`` as the path of its bytes."""
    update: dict[str, str] = {}
    for field, file_id in file_refs(spec).items():
        update[field] = str(local_source(settings, session.get_one(File, file_id)).resolve())
    if classify_source(spec.model) == "fine_tuned":
        folder = fine_tuned.local_model(session, settings, value=spec.model, tenant=tenant)
        update["model"] = str(folder.resolve())
    return spec.model_dump(mode="json") | update


def _run(spec: dict[str, Any], rows: int) -> dict[str, Any]:
    request = json.dumps({"spec": spec, "rows": rows})
    command = [sys.executable, "-m", "trainer_core.preview"]
    try:
        done = subprocess.run(command, input=request, capture_output=True, text=True,
                              timeout=PREVIEW_TIMEOUT_S, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise InvalidRequest(f"the preview took over {PREVIEW_TIMEOUT_S:.0f} s; ask for fewer "
                             "rows", param="rows") from None  # fmt: skip
    if done.returncode == BAD_PREVIEW:
        error = json.loads(done.stdout)["error"]
        raise InvalidRequest(_unprefixed(error["message"], error["param"]), param=error["param"])
    if done.returncode != 0:
        raise RuntimeError(f"the preview failed (exit {done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result
