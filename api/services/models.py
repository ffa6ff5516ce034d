"""/v1/models: the built-in base models, the tenant's fine-tuned ones and the names
``GRADACC_SERVE_UPSTREAMS`` sends elsewhere by exact name; a fine-tuned model can be deleted (its
weights go; the job and its metrics stay)."""

from __future__ import annotations

import shutil

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.schemas.openai import ModelObject
from gradacc.alias_setting import ANY
from gradacc.errors import ModelNotFound, NotAllowed
from gradacc.serving.aliases import tenant_aliases
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.tables import FINE_TUNING_API, Job, JobStatus
from trainer_core.spec.fields import BUILTIN_MODELS
from trainer_core.spec.outputs import MODEL_DIR

BUILTIN_CREATED = 1767225600  # 2026-01-01: the built-ins ship with the code
ALIAS_OWNER = "alias"  # owned_by of an alias (its alias_for: the model it names)
UPSTREAM_OWNER = "upstream"  # owned_by of a model an upstream server answers (created: unknown, 0)


def _owned(job: Job) -> ModelObject:
    created = job.finished_at or job.created_at
    return ModelObject(
        id=fine_tuned.name_of(job), created=int(created.timestamp()), owned_by=job.tenant
    )


def _live(session: Session, *, tenant: str) -> list[Job]:
    query = select(Job).where(
        Job.tenant == tenant, Job.api == FINE_TUNING_API, Job.status == JobStatus.SUCCEEDED
    )
    jobs = session.scalars(query.order_by(Job.id.desc()))
    return [job for job in jobs if not fine_tuned.model_deleted(job)]


def list_models(session: Session, settings: Settings, *, tenant: str) -> list[ModelObject]:
    builtins = [
        ModelObject(id=m, created=BUILTIN_CREATED, owned_by="gradacc") for m in BUILTIN_MODELS
    ]
    elsewhere = [
        ModelObject(id=m, created=0, owned_by=UPSTREAM_OWNER)
        for m in settings.serve_upstreams.listed_names()
    ]
    owned = [_owned(job) for job in _live(session, tenant=tenant)]
    return builtins + owned + elsewhere + _aliases(session, settings, tenant)


def _aliases(session: Session, settings: Settings, tenant: str) -> list[ModelObject]:
    """The tenant's aliases by exact name (a pattern is no model id), with what they name."""
    names = settings.serve_aliases.of(tenant) | tenant_aliases(session, tenant)
    return [
        ModelObject(id=alias, created=0, owned_by=ALIAS_OWNER, alias_for=model)
        for alias, model in sorted(names.items())
        if not alias.endswith(ANY)
    ]


def _fine_tuned_job(session: Session, *, model: str, tenant: str) -> Job:
    """A succeeded job's final model (a checkpoint's name is not a listed model)."""
    found = fine_tuned.find(session, model, tenant=tenant)
    if found is None or found[0].step is not None or found[1].status != JobStatus.SUCCEEDED:
        raise ModelNotFound(model)
    return found[1]


def get_model(session: Session, settings: Settings, *, model: str, tenant: str) -> ModelObject:
    if model in BUILTIN_MODELS:
        return ModelObject(id=model, created=BUILTIN_CREATED, owned_by="gradacc")
    if model in settings.serve_upstreams.listed_names():
        return ModelObject(id=model, created=0, owned_by=UPSTREAM_OWNER)
    for alias in _aliases(session, settings, tenant):
        if alias.id == model:
            return alias
    return _owned(_fine_tuned_job(session, model=model, tenant=tenant))


def delete_model(session: Session, settings: Settings, *, model: str, tenant: str) -> None:
    """The row says deleted first (no job can be created on it from then), then the folders go:
    the model and the checkpoints' model views."""
    if model in BUILTIN_MODELS:
        message = f"{model} is a base model; only fine-tuned ones can be deleted"
        raise NotAllowed(message, param="model")
    job = _fine_tuned_job(session, model=model, tenant=tenant)
    job.fine_tuning = {**(job.fine_tuning or {}), "model_deleted": True}
    session.commit()
    job_dir = settings.jobs_dir / job.id
    shutil.rmtree(job_dir / MODEL_DIR, ignore_errors=True)
    for view in job_dir.glob(".ckpt-model-*"):
        shutil.rmtree(view, ignore_errors=True)
