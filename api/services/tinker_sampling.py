"""The Tinker API's samplers: sampling sessions (from a checkpoint of the tenant's, or a base
model, as on-policy distillation's teacher), what a sampler is, and ``asample`` as a future in
the sampler's queue. Options this server does not compute are refused by name: the SDK raises
when an answer lacks what it asked for."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from api.services.tinker import (
    active,
    checked_base,
    checkpoint_row,
    need,
    new_sampler,
    open_session,
    own_model,
)
from gradacc.errors import InvalidRequest, ObjectNotFound
from gradacc.settings import Settings
from gradacc.tinker import queue
from gradacc.tinker.tables import TinkerModel


def create_sampling_session(
    session: Session, settings: Settings, tenant: str, body: dict[str, Any]
) -> dict[str, Any]:
    owner = open_session(session, tenant, body.get("session_id"))
    number = need(body, "sampling_session_seq_id", int)
    sampler_id = f"{owner.id}:sample:{number}"
    existing = session.get(TinkerModel, sampler_id)
    if existing is None:
        model_path = body.get("model_path")
        if model_path is not None:
            found = checkpoint_row(session, tenant, str(model_path), "model_path")
            if found.checkpoint_id.startswith("external_weights/"):
                raise InvalidRequest("sample from weights/ or sampler_weights/", param="model_path")
            source = session.get(TinkerModel, found.run_id)
            assert source is not None
            base = source.base_model
        else:
            base = checked_base(settings, need(body, "base_model", str))
        session.add(new_sampler(owner.id, sampler_id, tenant, base, model_path))
        session.commit()
    return {"sampling_session_id": sampler_id, "type": "create_sampling_session"}


def sampler_info(session: Session, tenant: str, sampler_id: str) -> dict[str, Any]:
    row = own_model(session, tenant, sampler_id, param="sampler_id")
    if row.kind != "sample":
        raise ObjectNotFound("sampler", sampler_id, param="sampler_id")
    return {"sampler_id": row.id, "base_model": row.base_model, "model_path": row.weights_path}


def asample(session: Session, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
    row = own_model(session, tenant, body.get("sampling_session_id"), param="sampling_session_id")
    if row.kind != "sample":
        raise ObjectNotFound("sampler", row.id, param="sampling_session_id")
    active(row, "sampling_session_id")
    seq_id = need(body, "seq_id", int)
    count = need(body, "num_samples", int)
    if not 1 <= count <= 128:
        raise InvalidRequest("from 1 to 128", param="num_samples")
    for key in ("prompt_alt_tokens_k", "topk_prompt_logprobs", "topk_sample_logprobs"):
        if body.get(key):
            raise InvalidRequest("not served by this server (docs/tinker.md)", param=key)
    if body.get("prompt_logprobs_last_n") is not None or body.get("target_prompt_logprobs"):
        raise InvalidRequest("not served by this server (docs/tinker.md)", param="prompt_logprobs")
    request_id = queue.enqueue(
        session,
        tenant=tenant,
        model_id=row.id,
        seq_id=seq_id,
        kind="sample",
        body=json.dumps(body).encode(),
    )
    ids = [f"{row.id}:{seq_id}:{i}" for i in range(count)]
    return {"request_id": request_id, "sample_sequence_ids": ids}
