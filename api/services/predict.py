"""POST /v1/jobs/{id}/predict: check the job and the request, queue it in the predictions table,
wait for a worker's answer (the API never loads a model: no torch here)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.schemas.predict import PredictRequest
from api.services.jobs import get_job
from gradacc.errors import (
    InvalidRequest,
    NotTrained,
    PredictionFailed,
    PredictionTimeout,
    TooManyPredictions,
)
from gradacc.retry import Backoff
from gradacc.serving.predictions import count_waiting, create_prediction, give_up, read_answer
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.tables import JobStatus, utcnow

POLL_CAP_S = 0.25  # a wait polls at predict_poll_interval_s first, doubling up to this


def queue_prediction(
    session: Session, settings: Settings, *, job_id: str, tenant: str, body: PredictRequest
) -> str:
    job = get_job(session, job_id=job_id, tenant=tenant)
    causal = job.spec.get("task") == "causal-lm"
    if causal and body.inputs is not None:
        raise InvalidRequest("a causal LM takes prompt or messages", param="inputs")
    if not causal and body.inputs is None:
        raise InvalidRequest("a classifier takes inputs (a list of texts)", param="inputs")
    if job.status != JobStatus.SUCCEEDED:
        raise NotTrained(f"job {job_id} is {job.status}: only a succeeded job's models answer")
    try:
        fine_tuned.model_folder(settings, job, body.checkpoint)
    except fine_tuned.ModelUnavailable as exc:
        raise InvalidRequest(exc.message, param="checkpoint") from None
    since = utcnow() - timedelta(seconds=settings.serve_timeout_s)
    if count_waiting(session, tenant=tenant, since=since) >= settings.max_predicts_per_tenant:
        raise TooManyPredictions(settings.max_predicts_per_tenant)
    prediction = create_prediction(
        session,
        job_id=job_id,
        tenant=tenant,
        step=body.checkpoint,
        request=body.model_dump(exclude_none=True),
    )
    session.commit()
    return prediction


async def wait_for_answer(
    sessions: sessionmaker[Session], settings: Settings, prediction_id: str
) -> dict[str, Any]:
    deadline = time.monotonic() + settings.serve_timeout_s
    # A quick answer is seen quickly; a slow one costs a read every POLL_CAP_S, not every 20 ms.
    first = settings.predict_poll_interval_s
    backoff = Backoff(first=first, cap=max(POLL_CAP_S, first))

    def read() -> tuple[str, Any, str | None]:
        with sessions() as session:
            return read_answer(session, prediction_id=prediction_id)

    while True:
        status, response, error = await run_in_threadpool(read)
        if status == "done":
            return dict(response)
        if status == "failed":
            raise PredictionFailed(f"the worker could not answer: {error}")
        if time.monotonic() >= deadline:
            with sessions() as session:
                give_up(session, prediction_id=prediction_id)
                session.commit()
            raise PredictionTimeout(
                f"no worker answered within {settings.serve_timeout_s:g} s "
                "(GRADACC_SERVE_TIMEOUT_S); is a worker running?"
            )
        await asyncio.sleep(backoff.next_delay())
