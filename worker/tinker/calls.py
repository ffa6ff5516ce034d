"""One Tinker request on a model this host holds: each kind's call into the core, and its answer
(protobuf for forward and sample, JSON for the rest). A ``ValueError`` is the client's mistake
(answered ``category: user``)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from gradacc.settings import Settings
from gradacc.tables import utcnow
from gradacc.tinker import names, paths
from gradacc.tinker.tables import TinkerCheckpoint, TinkerModel
from trainer_core.tinker_host.host import StepParams, TrainingHost
from trainer_core.tinker_host.model import ModelChoice
from trainer_core.tinker_host.sampling import SampleParams, sample
from worker.tinker import codec
from worker.tinker.ranks import Replicated

Answer = tuple[bytes, str]  # the result and its type, proto or json
SAVED_KINDS = {
    "save_weights": "weights",
    "save_weights_for_sampler": "sampler_weights",
    "save_weights_external": "external_weights",
}


def load(session: Session, settings: Settings, row: TinkerModel) -> TrainingHost:
    """A training model's fresh host, or a sampler's (its weights read from its checkpoint)."""
    choice = ModelChoice(names.source_of(row.base_model), rank=row.rank, seed=row.seed)
    if row.kind == "sample" and row.weights_path:
        found = checkpoint_file(session, settings, row.tenant, row.weights_path)
        with_weights = _run_choice(session, found.run_id, choice)
        host = TrainingHost(with_weights, micro_batch=settings.tinker_micro_batch)
        host.restore(Path(found.file), optimizer=False)
        return host
    return TrainingHost(choice, family=row.optimizer, micro_batch=settings.tinker_micro_batch)


def _run_choice(session: Session, run_id: str, choice: ModelChoice) -> ModelChoice:
    run = session.get(TinkerModel, run_id)
    return choice if run is None else ModelChoice(choice.source, rank=run.rank, seed=run.seed)


def checkpoint_file(
    session: Session, settings: Settings, tenant: str, path: str
) -> TinkerCheckpoint:
    parsed = paths.parse(path)
    found = session.get(TinkerCheckpoint, (parsed.run_id, parsed.checkpoint_id))
    if found is None or found.tenant != tenant or not Path(found.file).exists():
        raise ValueError(f"path: no checkpoint {path!r}")
    return found


def run(
    session: Session,
    settings: Settings,
    row: TinkerModel,
    host: TrainingHost | Replicated,
    kind: str,
    body: bytes,
) -> Answer:
    if kind in ("forward", "forward_backward"):
        data, loss, config = codec.decode_forward(body)
        output = host.forward_backward(data, loss, config, forward_only=kind == "forward")
        return codec.encode_forward(output), "proto"
    request: dict[str, Any] = json.loads(body)
    if kind == "sample":
        return _sample(host, request), "proto"
    if kind == "optim_step":
        metrics = host.optim_step(step_params(request))
        return _json({"metrics": metrics, "type": "optim_step"})
    if kind in SAVED_KINDS:
        return _save(session, settings, row, host, kind, request)
    if kind == "load_weights":
        found = checkpoint_file(session, settings, row.tenant, str(request.get("path")))
        if not found.checkpoint_id.startswith("weights/"):
            raise ValueError("path: load a save_state (weights/) checkpoint")
        host.restore(Path(found.file), optimizer=bool(request.get("optimizer")))
        return _json({"path": request.get("path"), "model_id": row.id, "type": "load_weights"})
    raise ValueError(f"{kind}: not served here")


def step_params(request: dict[str, Any]) -> StepParams:
    adam = request.get("adam_params")
    if adam is not None:
        keys = ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm")
        return StepParams("adamw", **{k: float(adam[k]) for k in keys if k in adam})
    other = request.get("optimizer_params") or request.get("optim_params")
    if not isinstance(other, dict) or other.get("type") != "sgd":
        raise ValueError("optimizer_params.type: adam_params or sgd parameters are served")
    if "learning_rate" not in other:
        raise ValueError("optimizer_params.learning_rate: required")
    return StepParams(
        "sgd",
        learning_rate=float(other["learning_rate"]),
        grad_clip_norm=float(other.get("grad_clip_norm") or 0.0),
    )


def _save(
    session: Session,
    settings: Settings,
    row: TinkerModel,
    host: TrainingHost | Replicated,
    kind: str,
    request: dict[str, Any],
) -> Answer:
    """``save_state`` (weights and optimizer), sampler weights (a named one also as a model
    folder, served by chat completions under its ``tinker://`` name) or an export (the folder
    alone, downloaded through ``external_weights_urls``)."""
    ephemeral = request.get("path") is None
    name = paths.check_name(str(request.get("path") or request.get("ephemeral_name")))
    where = paths.TinkerPath(row.id, SAVED_KINDS[kind], name)
    existing = session.get(TinkerCheckpoint, (row.id, where.checkpoint_id))
    if existing is not None and kind == "save_weights" and not request.get("overwrite"):
        raise ValueError(f"path: {where} exists; save under another name or with overwrite")
    file = paths.file_of(settings.tinker_dir, row.tenant, where)
    folder = (
        None
        if ephemeral and kind != "save_weights_external"
        else paths.folder_of(settings.tinker_dir, row.tenant, where)
    )
    size = 0
    if kind != "save_weights_external":
        size = host.save(file, optimizer=kind == "save_weights")
    if folder is not None and kind != "save_weights":
        size += host.export(folder)
    ttl = request.get("ttl_seconds")
    expires = utcnow() + timedelta(seconds=float(ttl)) if ttl else None
    if existing is None:
        existing = TinkerCheckpoint(
            run_id=row.id, checkpoint_id=where.checkpoint_id, tenant=row.tenant
        )
        session.add(existing)
    existing.file = str(folder if kind == "save_weights_external" else file)
    existing.folder = str(folder) if folder is not None and kind != "save_weights" else None
    existing.size_bytes, existing.created_at, existing.expires_at = size, utcnow(), expires
    session.commit()
    if kind == "save_weights_for_sampler" and ephemeral:
        return _json({"sampling_session_id": request["sampler_id"], "type": kind})
    if kind == "save_weights_external":
        return _json({"path": str(where), "size_bytes": size, "type": kind})
    return _json({"path": str(where), "type": kind})


def _sample(host: TrainingHost | Replicated, request: dict[str, Any]) -> bytes:
    given = request.get("sampling_params") or {}
    stop = given.get("stop")
    params = SampleParams(
        max_tokens=int(given.get("max_tokens") or 16),
        temperature=float(given.get("temperature", 1.0)),
        top_k=int(given.get("top_k", -1)),
        top_p=float(given.get("top_p", 1.0)),
        seed=given.get("seed"),
        stop=[stop] if isinstance(stop, str) else stop,
    )
    prompt = codec.prompt_tokens(request)
    found = sample(
        host.model,
        host.tokenizer,
        prompt,
        int(request["num_samples"]),
        params,
        prompt_logprobs=bool(request.get("prompt_logprobs")),
    )
    return codec.encode_samples(found)


def _json(value: dict[str, Any]) -> Answer:
    return json.dumps(value).encode(), "json"
