"""Which local files a job may read: local model and dataset paths must lie under a data root.

Used by the API at POST and by the worker again before training (the worker's filesystem is the
one that counts). What is a path is decided by ``trainer_core.spec.sources.classify_source``, the very
function the core loads with: builtins and hub ids pass, anything the core would read from disk
(a hub-id-looking name of an existing file or directory included) is checked.
"""

from __future__ import annotations

import os
from pathlib import Path

from gradacc.errors import InvalidRequest
from gradacc.settings import Settings
from trainer_core.spec.job import JobSpec
from trainer_core.spec.sources import classify_source


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(path)))


def check_path_allowed(value: str, *, roots: list[Path], param: str) -> None:
    """Raise ``InvalidRequest`` unless ``value`` resolves (symlinks and ``..`` included) inside
    one of ``roots`` and exists there. The message names the field and the roots as configured
    (what the operator chose to expose), never the path the value resolved to."""
    try:
        real = _real(value)
    except (OSError, ValueError) as exc:
        raise InvalidRequest("not a usable local path", param=param) from exc
    where = ", ".join(str(root) for root in roots)
    for root in roots:
        real_root = _real(root)
        if real == real_root or real_root in real.parents:
            if not real.exists():
                raise InvalidRequest(f"no such file or directory under {where}", param=param)
            return
    raise InvalidRequest(
        f"local paths must lie inside the configured data roots ({where}); put the file there, "
        "upload it (POST /v1/files) and name its file-… id, or use a builtin: name or a hub id",
        param=param,
    )


def check_spec_allowed(spec: JobSpec, settings: Settings) -> None:
    """The service's limits on a spec that the core itself would accept."""
    if spec.num_train_epochs > settings.max_epochs:
        raise InvalidRequest(f"at most {settings.max_epochs} epochs", param="num_train_epochs")
    for field in ("max_train_samples", "max_eval_samples"):
        value = getattr(spec, field)
        if value is not None and value > settings.max_samples:
            raise InvalidRequest(f"at most {settings.max_samples} samples", param=field)
    for field in ("text_column", "label_column"):
        # The core's column pattern ends in "$", which lets one trailing newline through.
        value = getattr(spec, field)
        if value is not None and any(ord(ch) < 32 for ch in value):
            raise InvalidRequest("column names contain no control characters", param=field)
    roots = settings.resolved_data_roots()
    for field in ("model", "dataset", "eval_dataset"):
        value = getattr(spec, field)
        if value is not None and classify_source(value) == "local":
            check_path_allowed(value, roots=roots, param=field)


def check_priority(priority: int, settings: Settings) -> None:
    """Above ``max_priority`` is refused (``priority``). Below 0 is any tenant's right: it only
    lets its own job wait behind others (the schema bounds it at -PRIORITY_BOUND)."""
    if priority > settings.max_priority:
        raise InvalidRequest(
            f"at most {settings.max_priority} (GRADACC_MAX_PRIORITY); the default is 0",
            param="priority",
        )
