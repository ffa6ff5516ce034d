"""A fine-tuning job's webhook body: OpenAI's event object (``FineTuningJobSucceededWebhookEvent``
and its failed and cancelled siblings in the openai SDK)."""

from __future__ import annotations

import json


def fine_tuning_event(*, event_id: str, event: str, created_at: int, job_id: str) -> bytes:
    """``event`` is the outbox row's name (``fine_tuning.job.succeeded``, ...); ``job_id`` is the
    ftjob id (a job's id is the same on /v1/jobs and /v1/fine_tuning/jobs)."""
    payload = {
        "id": event_id,
        "object": "event",
        "type": event,
        "created_at": created_at,
        "data": {"id": job_id},
    }
    return json.dumps(payload, separators=(",", ":")).encode()
