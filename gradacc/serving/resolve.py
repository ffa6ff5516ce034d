"""OpenAI's chat completions, the part both sides share (docs/serving.md): which model a name
stands for (``resolve_model``: the API checks it before forwarding, the predict server again
before loading), and where a predict server answers (``record_server`` / ``pick_server``).

A name is a built-in causal LM, or one of the tenant's fine-tuned models or kept checkpoints
(``gradacc.sources.fine_tuned``); anything else, another tenant's ``ft:`` model included, is
``model_not_found``: a name never tells one tenant what another has.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.orm import Session

from gradacc.errors import InvalidRequest, ModelNotFound
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.sources.files import is_file_id, local_source
from gradacc.sources.hub import cached_snapshot, check_allowed
from gradacc.tables import File, FilePurpose, JobStatus, Worker
from gradacc.tinker import paths as tinker_paths
from gradacc.tinker.tables import TinkerCheckpoint
from gradacc.workers import alive_workers
from trainer_core.spec.cards import ADAPTER_CONFIG
from trainer_core.spec.fields import BUILTIN_MODEL_TASKS, HUB_ID_PATTERN
from trainer_core.spec.sources import classify_source

CAUSAL = "causal-lm"
TINKER_PREFIX = tinker_paths.PREFIX
HUB_ID = re.compile(HUB_ID_PATTERN)  # what a job accepts as a hub id
CAUSAL_ARCHITECTURES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
# A built-in base model's weights are made from a seed (they exist nowhere else): the seed a job
# gets by default, so the base a client talks to is the one a default job trains from.
BUILTIN_SEED = 42
TENANT_HEADER = "X-Gradacc-Tenant"  # who asks, told by the API to the predict server


@dataclass(frozen=True)
class ServedModel:
    name: str  # as the client wrote it: echoed in the answer's ``model``
    builtin: str | None  # a built-in base model, made from BUILTIN_SEED
    folder: Path | None  # or the folder to load (``fine_tuned.model_folder``)


@dataclass(frozen=True)
class ServerAddress:
    url: str  # base URL: ``{url}/v1/chat/completions``
    token: str


def resolve_model(session: Session, settings: Settings, *, model: str, tenant: str) -> ServedModel:
    """What ``model`` names for ``tenant``; ``ModelNotFound`` (404) when it names nothing of
    theirs, ``InvalidRequest`` naming ``model`` when it is not a language model."""
    if model in BUILTIN_MODEL_TASKS:
        if CAUSAL not in BUILTIN_MODEL_TASKS[model]:
            raise InvalidRequest(f"{model} is not a language model", param="model")
        return ServedModel(model, model, None)
    if is_file_id(model):
        return _uploaded(session, settings, model, tenant)
    if model.startswith(TINKER_PREFIX):
        return _tinker(session, model, tenant)
    if is_hub_id(model):
        return _hub(settings, model)
    found = fine_tuned.find(session, model, tenant=tenant, any_api=True)
    if found is None:
        raise ModelNotFound(model)
    name, job = found
    if name.step is None and job.status != JobStatus.SUCCEEDED:
        raise ModelNotFound(model)  # not trained (yet): there is no such model to answer
    if job.spec.get("task") != CAUSAL:
        raise InvalidRequest(f"{model} is a classifier, not a language model", param="model")
    try:
        folder = fine_tuned.model_folder(settings, job, name.step)
    except fine_tuned.ModelUnavailable:
        raise ModelNotFound(model) from None
    return ServedModel(model, None, folder)


def _tinker(session: Session, model: str, tenant: str) -> ServedModel:
    """A Tinker client's named sampler weights or export (``tinker://<run>/sampler_weights/<name>``),
    as the model folder its host wrote (docs/tinker.md)."""
    try:
        path = tinker_paths.parse(model, "model")
    except ValueError:
        raise ModelNotFound(model) from None
    found = session.get(TinkerCheckpoint, (path.run_id, path.checkpoint_id))
    if (
        found is None
        or found.tenant != tenant
        or not found.folder
        or not Path(found.folder).is_dir()
    ):
        raise ModelNotFound(
            model, hint="a Tinker model is served by the name of named sampler weights or an export"
        )
    return ServedModel(model, None, Path(found.folder))


def is_hub_id(model: str) -> bool:
    """``owner/name``, as a job's model names a hub repository."""
    return classify_source(model) == "hub" and "/" in model and HUB_ID.fullmatch(model) is not None


def _uploaded(session: Session, settings: Settings, model: str, tenant: str) -> ServedModel:
    """One of the tenant's uploaded models (``file-…``, purpose model): what it can train from,
    it can talk to."""
    file = session.get(File, model)
    if file is None or file.tenant != tenant or file.purpose != FilePurpose.MODEL:
        raise ModelNotFound(model)
    architectures = (file.details or {}).get("architectures") or []
    if architectures and not any(a.endswith(CAUSAL_ARCHITECTURES) for a in architectures):
        shown = ", ".join(architectures)
        raise InvalidRequest(f"{model} is a {shown}, not a language model", param="model")
    return ServedModel(model, None, local_source(settings, file))


def _hub(settings: Settings, model: str) -> ServedModel:
    """A hub model in this server's Hugging Face cache (allowed by ``GRADACC_HUB_ALLOW``), as
    a job would train from it. The API never downloads one: an uncached id is a 404 saying so."""
    check_allowed(model, settings, param="model")
    snapshot = cached_snapshot(model, "model")
    if snapshot is None:
        raise ModelNotFound(
            model,
            hint="it is not in this server's Hugging Face cache "
            "(docs/models.md: the operator fills it, gradacc cache)",
        )
    if (snapshot / ADAPTER_CONFIG).is_file():
        raise InvalidRequest(
            f"{model} is an adapter on the hub; train from it, or serve its base", param="model"
        )
    return ServedModel(model, None, snapshot)


def record_server(session: Session, *, worker: str, url: str, token: str | None) -> bool:
    """Write where ``worker``'s predict server answers; False when its row is gone (the worker
    registers again: the caller writes again later). Commits."""
    stmt = update(Worker).where(Worker.name == worker).values(serve_url=url, serve_token=token)
    found = session.execute(stmt).rowcount == 1  # type: ignore[attr-defined]
    session.commit()
    return bool(found)


def pick_server(session: Session, settings: Settings) -> ServerAddress | None:
    """A live worker's predict server, an idle worker's first (a training job keeps its own
    worker's CPU busy); None when no live worker records one."""
    serving = [w for w in alive_workers(session, alive_s=settings.worker_alive_s) if w.serve_url]
    if not serving:
        return None
    idle = [w for w in serving if w.current_job is None] or serving
    chosen = random.choice(idle)
    token = chosen.serve_token or settings.serve_token or ""
    return ServerAddress(str(chosen.serve_url), token)
