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

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Row
from sqlalchemy.orm import Session, object_session

from gradacc.errors import InvalidRequest
from gradacc.ids import id_pattern
from gradacc.settings import Settings
from gradacc.tables import FINE_TUNING_API, File, Job, JobStatus
from trainer_core.spec.cards import ADAPTER_CONFIG
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import (
    ADAPTER_BASE_DIR,
    ADAPTER_BUILTIN_BASE,
    ADAPTER_DIR,
    MODEL_DIR,
    kept_checkpoints,
)
from trainer_core.spec.sources import FINE_TUNED_PREFIX, classify_source, local_path

_CKPT = re.compile(r"^ckpt-step-(\d{1,12})$")
_JOB = re.compile(id_pattern("job_"))
# What save_pretrained writes beside the weights: a checkpoint's model view borrows these.
WEIGHT_FILES = ("model.safetensors", "config.json")
ADAPTER_WEIGHTS = "adapter_model.safetensors"


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


def model_deleted(job: Job | Row[Any]) -> bool:
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
    config, and the tokenizer files the job saved with its model); for a LoRA job, a view of
    its adapters on their base (``_adapter_view``). Raises ``ModelUnavailable``."""
    job_dir = settings.jobs_dir / job.id
    final = job_dir / MODEL_DIR
    lora = job.spec.get("lora") is not None and (job_dir / ADAPTER_DIR / ADAPTER_CONFIG).is_file()
    if step is None:
        if (final / "config.json").is_file():
            return final
        if lora:
            return _adapter_view(settings, job, None)
        raise ModelUnavailable(f"{job.id} saved no model")
    kept = {s: folder for s, folder, _ in kept_checkpoints(job_dir)}
    if step not in kept:
        steps = ", ".join(str(s) for s in sorted(kept)) or "none"
        raise ModelUnavailable(f"{job.id} keeps no checkpoint at step {step} (kept: {steps})")
    if lora:  # a LoRA checkpoint holds peft's whole state, not a plain model's weights
        return _adapter_view(settings, job, (step, kept[step]))
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
    sources = {p.name: p for p in final.iterdir() if p.is_file() and p.name not in WEIGHT_FILES}
    sources |= {name: checkpoint / name for name in WEIGHT_FILES}
    _link_files(sources, tmp)
    try:
        tmp.rename(view)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return view


def _adapter_view(settings: Settings, job: Job, checkpoint: tuple[int, Path] | None) -> Path:
    """``.lora-model/`` (or ``.lora-ckpt-<step>/``): the adapters (or a checkpoint's peft state)
    and tokenizer the job saved, hard-linked, and their base, named as the core's loading rule
    reads it (``trainer_core.model.trained``): a built-in model and this job's seed, a hub id in
    the adapter config, or the base model's files linked into ``base/``. The base comes from the
    job's own spec as the service resolves any model name (the tenant's files and models only),
    never from a path in a file. Built once, renamed in whole, hidden from /artifacts."""
    job_dir, adapter = settings.jobs_dir / job.id, settings.jobs_dir / job.id / ADAPTER_DIR
    view = job_dir / (".lora-model" if checkpoint is None else f".lora-ckpt-{checkpoint[0]}")
    if view.is_dir():
        return view
    spec = JobSpec.model_validate(job.spec)
    tmp = job_dir / f"{view.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        skip = {ADAPTER_CONFIG} | ({ADAPTER_WEIGHTS} if checkpoint else set())
        files = {p.name: p for p in adapter.iterdir() if p.is_file() and p.name not in skip}
        if checkpoint is not None:
            files[WEIGHT_FILES[0]] = checkpoint[1] / WEIGHT_FILES[0]  # the peft state dict
        _link_files(files, tmp)
        config = json.loads((adapter / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        kind = classify_source(spec.model)
        config["base_model_name_or_path"] = spec.model if kind == "hub" else None
        (tmp / ADAPTER_CONFIG).write_text(json.dumps(config), encoding="utf-8")
        if kind == "builtin":
            base = {"model": spec.model, "seed": spec.seed}
            (tmp / ADAPTER_BUILTIN_BASE).write_text(json.dumps(base), encoding="utf-8")
        elif kind != "hub":
            _link_tree(_base_model(settings, job, spec.model), tmp / ADAPTER_BASE_DIR)
        tmp.rename(view)
    except OSError:  # another process built it first, or it could not be built
        shutil.rmtree(tmp, ignore_errors=True)
        if not view.is_dir():
            raise ModelUnavailable(f"{job.id}'s adapters cannot be read") from None
    return view


def _base_model(settings: Settings, job: Job, model: str) -> Path:
    """The folder of a LoRA job's base model: the tenant's uploaded model, fine-tuned model, or
    a local folder (checked against the data roots when that job was created)."""
    kind = classify_source(model)
    session = object_session(job)
    if kind == "fine_tuned" and session is not None:
        return local_model(session, settings, value=model, tenant=job.tenant)
    if kind == "file" and session is not None:
        file = session.get(File, model)
        folder = settings.files_dir / model / MODEL_DIR
        if file is None or file.tenant != job.tenant or not folder.is_dir():
            raise ModelUnavailable(f"{job.id}'s base model {model} no longer exists")
        return folder
    if kind == "local":
        return local_path(model).resolve()
    raise ModelUnavailable(f"{job.id}'s base model {model} cannot be found")


def _link_files(files: dict[str, Path], into: Path) -> None:
    """Hard links (copies across file systems) of ``files`` in a new folder ``into``."""
    into.mkdir()
    for name, source in files.items():
        try:
            os.link(source, into / name)
        except OSError:
            shutil.copy2(source, into / name)


def _link_tree(source: Path, into: Path) -> None:
    """``source`` again as ``into``: its folders made, its files linked; links not followed."""
    for current, dirs, files in os.walk(source):
        here = into / Path(current).relative_to(source)
        _link_files({name: Path(current) / name for name in files}, here)
        dirs[:] = [d for d in dirs if not (Path(current) / d).is_symlink()]


def local_model(session: Session, settings: Settings, *, value: str, tenant: str) -> Path:
    """In the training child: the folder a fine-tuned model's name stands for."""
    found = find(session, value, tenant=tenant, any_api=True)
    if found is None:
        raise ModelUnavailable(f"model: {value} no longer exists", param="model")
    name, job = found
    return model_folder(settings, job, name.step)
