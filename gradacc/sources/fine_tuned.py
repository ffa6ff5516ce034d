"""Fine-tuned models as sources: ``ft:<base>:<tenant>:<suffix>:<job id>`` (a job's final model)
and ``…:ckpt-step-<N>`` (one of its kept checkpoints), the names the fine-tuning API gives them.
The base is the root model (``root_model``): a job trained from a fine-tuned model or checkpoint
is named after the model that one was trained from, so names never nest.

Either is accepted as ``model`` by both APIs, and so are a /v1/jobs job's (its suffix empty; its
/checkpoints list gives each checkpoint's name), though only fine-tuning jobs are in /v1/models. The base may hold colons itself
(``builtin:tiny-chat``), so a name is read from the right: the job id last, or the checkpoint
step and then the job id. The tenant and suffix parts must match the job's, so a name cannot
reach another tenant's job. The API checks at POST that the model is there; the training child
turns the name into the folder it loads (``local_model``), as it does an uploaded file's id.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Row
from sqlalchemy.orm import Session

from gradacc.errors import InvalidRequest
from gradacc.ids import id_pattern
from gradacc.settings import Settings
from gradacc.tables import FINE_TUNING_API, Job, JobStatus
from trainer_core.spec.errors import JobError
from trainer_core.spec.outputs import MODEL_DIR, kept_checkpoints
from trainer_core.spec.sources import FINE_TUNED_PREFIX

_CKPT = re.compile(r"^ckpt-step-(\d{1,12})$")
_JOB = re.compile(id_pattern("job_"))
# What save_pretrained writes beside the weights: a checkpoint's model view borrows these.
WEIGHT_FILES = ("model.safetensors", "config.json")


@dataclass(frozen=True)
class FineTunedName:
    base: str
    tenant: str
    suffix: str
    job_id: str
    step: int | None  # a checkpoint's global step; None: the final model


class ModelUnavailable(JobError):
    """A job's fine-tuned model was deleted by the time it trains."""

    code = "model_not_found"


def parse(value: str) -> FineTunedName | None:
    """The parts of a fine-tuned model's name; None if ``value`` is not one."""
    if not value.startswith(FINE_TUNED_PREFIX):
        return None
    parts = value[len(FINE_TUNED_PREFIX) :].split(":")
    step = None
    if parts and (found := _CKPT.fullmatch(parts[-1])):
        step = int(found.group(1))
        parts = parts[:-1]
    if len(parts) < 4 or not _JOB.fullmatch(parts[-1]):
        return None
    base = ":".join(parts[:-3])
    return FineTunedName(base, parts[-3], parts[-2], parts[-1], step) if base else None


def root_model(value: str) -> str:
    """The model at the root of a fine-tuned name (itself, for any other model): a job trained
    from ``ft:builtin:tiny-chat:acme::job_a:ckpt-step-600`` is named after ``builtin:tiny-chat``,
    so names never nest; its job id keeps it unique, and its job's ``model`` says where it came
    from. Names written before this rule (``ft:ft:…``) unwrap to the same root."""
    while (name := parse(value)) is not None:
        value = name.base
    return value


def name_of(job: Job | Row[Any]) -> str:
    """A finished job's model name (``fine_tuned_model``): ``ft:<root model>:<tenant>:<suffix>:
    <job id>``, whatever model the job started from."""
    suffix = (job.fine_tuning or {}).get("suffix") or ""
    return f"{FINE_TUNED_PREFIX}{root_model(job.spec['model'])}:{job.tenant}:{suffix}:{job.id}"


def checkpoint_name(job: Job, step: int) -> str:
    return f"{name_of(job)}:ckpt-step-{step}"


def find_job(
    session: Session, name: FineTunedName, *, tenant: str, any_api: bool = False
) -> Job | None:
    """The tenant's fine-tuning job this name points at, if the name's parts match it; with
    ``any_api``, a /v1/jobs job too (its checkpoints and model train new jobs, but are not
    listed in /v1/models)."""
    job = session.get(Job, name.job_id)
    if job is None or job.tenant != tenant or (job.api != FINE_TUNING_API and not any_api):
        return None
    if name.tenant != job.tenant or name.suffix != ((job.fine_tuning or {}).get("suffix") or ""):
        return None
    model = str(job.spec.get("model", ""))
    # The root (today's names), or the whole model (a nested name given before names had roots).
    return job if name.base in (model, root_model(model)) else None


def model_deleted(job: Job) -> bool:
    """Its model was deleted through /v1/models (the job and its records stay)."""
    return bool((job.fine_tuning or {}).get("model_deleted"))


def find(
    session: Session, value: str, *, tenant: str, any_api: bool = False
) -> tuple[FineTunedName, Job] | None:
    """The name's parts and the tenant's job behind it, unless it names no such job or that
    job's model was deleted."""
    name = parse(value)
    job = find_job(session, name, tenant=tenant, any_api=any_api) if name is not None else None
    if name is None or job is None or model_deleted(job):
        return None
    return name, job


def check_model(session: Session, settings: Settings, *, value: str, tenant: str) -> None:
    """At POST: a fine-tuned model named as ``model`` exists, is the tenant's, is finished and
    not deleted, and (a checkpoint) is still kept. 4xx naming ``model`` otherwise."""
    found = find(session, value, tenant=tenant, any_api=True)
    if found is None:
        raise InvalidRequest(f"the model {value!r} does not exist", param="model")
    name, job = found
    if name.step is None and job.status != JobStatus.SUCCEEDED:
        raise InvalidRequest(
            f"{value} is not trained yet: its job is {job.status}; use one of its checkpoints "
            "or wait for it to succeed",
            param="model",
        )
    try:
        model_folder(settings, job, name.step)
    except ModelUnavailable as exc:
        raise InvalidRequest(exc.message, param="model") from None


def model_folder(settings: Settings, job: Job, step: int | None) -> Path:
    """The folder to load: the job's ``model/``, or a view of one checkpoint (its weights and
    config, and the tokenizer files the job saved with its model). Raises ``ModelUnavailable``."""
    job_dir = settings.jobs_dir / job.id
    final = job_dir / MODEL_DIR
    if step is None:
        if not (final / "config.json").is_file():
            raise ModelUnavailable(f"{job.id} has no full model (a LoRA job without merge_lora?)")
        return final
    kept = {s: folder for s, folder, _ in kept_checkpoints(job_dir)}
    if step not in kept:
        steps = ", ".join(str(s) for s in sorted(kept)) or "none"
        raise ModelUnavailable(f"{job.id} keeps no checkpoint at step {step} (kept: {steps})")
    if not final.is_dir():
        raise ModelUnavailable(
            f"{job.id}'s checkpoints become models once it saved its tokenizer (when it succeeds)"
        )
    return _checkpoint_view(job_dir, kept[step], final, step)


def _checkpoint_view(job_dir: Path, checkpoint: Path, final: Path, step: int) -> Path:
    """``.ckpt-model-<step>/``: hard links (copies across file systems), built once, renamed in
    whole, hidden from /artifacts (a dot name)."""
    view = job_dir / f".ckpt-model-{step}"
    if view.is_dir():
        return view
    tmp = job_dir / f".ckpt-model-{step}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    sources = {p.name: p for p in final.iterdir() if p.is_file() and p.name not in WEIGHT_FILES}
    sources |= {name: checkpoint / name for name in WEIGHT_FILES}
    for name, source in sources.items():
        try:
            os.link(source, tmp / name)
        except OSError:
            shutil.copy2(source, tmp / name)
    try:
        tmp.rename(view)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return view


def local_model(session: Session, settings: Settings, *, value: str, tenant: str) -> Path:
    """In the training child: the folder a fine-tuned model's name stands for."""
    found = find(session, value, tenant=tenant, any_api=True)
    if found is None:
        raise ModelUnavailable(f"model: {value} no longer exists", param="model")
    name, job = found
    return model_folder(settings, job, name.step)
