"""What a spec's sources may reach: local model and dataset paths lie under a data root, and what
they name in turn (a dataset card's data files, an adapter's base) stays inside them; hub ids are
allowed (``GRADACC_HUB_ALLOW``) and to be had (``gradacc.sources.hub``).

Used by the API at POST and by the worker again before training (the worker's filesystem is the
one that counts); the core checks the same things again as it loads (``trainer_core.spec.cards``).
What is a path is decided by ``trainer_core.spec.sources.classify_source`` from the text alone.
No refusal shows a path of this server: neither the roots nor what a value resolved to.
"""

from __future__ import annotations

import os
from pathlib import Path

from gradacc.errors import InvalidRequest
from gradacc.settings import Settings
from gradacc.sources.hub import check_hub_source
from trainer_core.spec.cards import ADAPTER_CONFIG, UnsafeSource, adapter_base, check_dataset_folder
from trainer_core.spec.job import JobSpec
from trainer_core.spec.sources import classify_source

OUTSIDE_ROOTS = (
    "local paths must lie inside the data roots this server allows (GRADACC_DATA_ROOTS); "
    "upload the file instead (POST /v1/files) and name its file-… id, or use a builtin: name "
    "or a hub id"
)


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(path)))


def check_path_allowed(value: str, *, roots: list[Path], param: str) -> Path:
    """The real path ``value`` names, when it resolves (symlinks and ``..`` included) inside one
    of ``roots`` and exists there; else ``InvalidRequest`` naming the field and the setting."""
    try:
        real = _real(value)
    except (OSError, ValueError) as exc:
        raise InvalidRequest("not a usable local path", param=param) from exc
    for root in roots:
        real_root = _real(root)
        if real == real_root or real_root in real.parents:
            if not real.exists():
                raise InvalidRequest("no such file or directory in the data roots", param=param)
            return real
    raise InvalidRequest(OUTSIDE_ROOTS, param=param)


def check_local_source(real: Path, settings: Settings, *, param: str) -> None:
    """What a local folder makes the libraries read besides itself: a dataset's card and links
    stay inside the folder; a model that is an adapter has a hub base, itself checked."""
    try:
        if real.is_dir() and param != "model":
            check_dataset_folder(real, param=param)
        if real.is_dir() and param == "model" and (real / ADAPTER_CONFIG).is_file():
            base = adapter_base(real / ADAPTER_CONFIG, param=param)
            check_hub_source(base, settings, param=param, adapter_base_of=True)
    except UnsafeSource as exc:
        raise InvalidRequest(str(exc).removeprefix(f"{param}: "), param=param) from None


def check_spec_allowed(spec: JobSpec, settings: Settings) -> None:
    """The service's limits on a spec that the core itself would accept."""
    if spec.num_train_epochs > settings.max_epochs:
        raise InvalidRequest(f"at most {settings.max_epochs} epochs", param="num_train_epochs")
    if spec.max_steps is not None and spec.max_steps > settings.max_steps:
        # max_steps overrides the epochs: without its own cap it would step around max_epochs.
        raise InvalidRequest(
            f"at most {settings.max_steps} optimizer steps (GRADACC_MAX_STEPS)", param="max_steps"
        )
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
        kind = None if value is None else classify_source(value)
        if value is not None and kind == "local":
            real = check_path_allowed(value, roots=roots, param=field)
            check_local_source(real, settings, param=field)
        elif value is not None and kind == "hub":
            check_hub_source(value, settings, param=field)


def check_priority(priority: int, settings: Settings, *, param: str = "priority") -> None:
    """Above ``max_priority`` is refused (``param``). Below 0 is any tenant's right: it only
    lets its own job wait behind others (the schema bounds it at -PRIORITY_BOUND)."""
    if priority > settings.max_priority:
        raise InvalidRequest(
            f"at most {settings.max_priority} (GRADACC_MAX_PRIORITY); the default is 0",
            param=param,
        )
