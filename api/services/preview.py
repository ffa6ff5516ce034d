"""POST /v1/files/{id}/preview: the job's data fields checked as a spec, the file ids resolved to
their bytes, and the core's preview run in a child process (``python -m trainer_core.preview``):
the API loads no tokenizer, and a slow or failing template costs the child, not the server.

The child runs under ``GRADACC_PREVIEW_MEMORY_MB`` of address space (RLIMIT_AS, set before it
imports anything of ours) and ``GRADACC_PREVIEW_TIMEOUT_S``; past either it is a 422 naming
``rows`` (fewer rows is what the asker can change), and the server carries on."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from api.schemas.preview import PreviewRead, PreviewRequest
from api.services.files import get_file
from api.services.shares import PREVIEWS, Cap
from gradacc.errors import InvalidRequest, ModelNotFound
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.sources.files import check_file_refs, file_refs, local_source
from gradacc.sources.limits import check_spec_allowed
from gradacc.tables import File, FilePurpose
from trainer_core.spec.job import JobSpec
from trainer_core.spec.sources import classify_source

BAD_PREVIEW = 2  # trainer_core.preview's exit status for a problem with the request
# The child: its address space capped, then ``python -m trainer_core.preview``. A bootstrap, not
# a ``preexec_fn`` (unsafe in a server with threads), so the cap covers the imports too.
_CHILD = (
    "import resource, runpy, sys\n"
    "cap, (_, hard) = int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_AS)\n"
    "resource.setrlimit(resource.RLIMIT_AS, (cap if hard < 0 else min(cap, hard), hard))\n"
    "runpy.run_module('trainer_core.preview', run_name='__main__', alter_sys=True)"
)
# How an allocation refused by RLIMIT_AS shows in the child's stderr: Python's MemoryError, a
# shared library that cannot be mapped, torch's allocator, Rust's (tokenizers aborts) or C++'s.
_OUT_OF_MEMORY = (
    "MemoryError",
    "Cannot allocate memory",
    "failed to map segment",
    "can't allocate memory",
    "memory allocation of",
    "bad_alloc",
)


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
    # Each preview is a process that imports transformers: a few at once, fewer per tenant.
    mine = Cap(settings.max_previews_per_tenant, "GRADACC_MAX_PREVIEWS_PER_TENANT")
    with PREVIEWS.hold(tenant, mine, total=Cap(settings.max_previews, "GRADACC_MAX_PREVIEWS")):
        return PreviewRead.model_validate(_run(resolved, body.rows, settings))


def _spec(body: PreviewRequest, file_id: str) -> JobSpec:
    fields = body.model_dump(exclude_none=True, exclude={"rows"})
    try:
        return JobSpec(task="causal-lm", dataset=file_id, **fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = str(error["loc"][0]) if error["loc"] else None
        raise InvalidRequest(
            _unprefixed(error["msg"].removeprefix("Value error, "), param), param=param
        ) from None


def _unprefixed(message: str, param: str | None) -> str:
    return message.removeprefix(f"{param}: ") if param else message


def _resolved(session: Session, settings: Settings, spec: JobSpec, tenant: str) -> dict[str, Any]:
    """The spec as the training child gets it: each ``file-…`` as the path of its bytes."""
    update: dict[str, str] = {}
    for field, file_id in file_refs(spec).items():
        update[field] = str(local_source(settings, session.get_one(File, file_id)).resolve())
    if classify_source(spec.model) == "fine_tuned":
        try:  # another tenant's model, or none: the same 404
            folder = fine_tuned.local_model(session, settings, value=spec.model, tenant=tenant)
        except fine_tuned.ModelUnavailable:
            raise ModelNotFound(spec.model) from None
        update["model"] = str(folder.resolve())
    return spec.model_dump(mode="json") | update


def _run(spec: dict[str, Any], rows: int, settings: Settings) -> dict[str, Any]:
    device = settings.device_memory_gb
    device_bytes = None if device is None else int(device * 2**30)
    request = json.dumps({"spec": spec, "rows": rows, "device_bytes": device_bytes})
    memory = settings.preview_memory_mb
    command = [sys.executable, "-c", _CHILD, str(memory * 2**20)]
    try:
        done = subprocess.run(
            command,
            input=request,
            capture_output=True,
            text=True,
            timeout=settings.preview_timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:  # the child is killed
        raise InvalidRequest(
            f"the preview took over {settings.preview_timeout_s:g} s "
            "(GRADACC_PREVIEW_TIMEOUT_S); ask for fewer rows",
            param="rows",
        ) from None
    if done.returncode == BAD_PREVIEW:
        error = json.loads(done.stdout)["error"]
        raise InvalidRequest(_unprefixed(error["message"], error["param"]), param=error["param"])
    if done.returncode != 0 and any(sign in done.stderr for sign in _OUT_OF_MEMORY):
        raise InvalidRequest(
            f"the preview needed more than {memory} MiB of address space "
            "(GRADACC_PREVIEW_MEMORY_MB); ask for fewer rows",
            param="rows",
        )
    if done.returncode != 0:
        raise RuntimeError(f"the preview failed (exit {done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result
