"""POST /v1/jobs/{id}/predict: try a trained model (a worker answers; the API loads none)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from api.deps import SettingsDep, TenantDep
from api.schemas.jobs import ErrorResponse
from api.schemas.predict import Generation, LabelList, PredictRequest, answer_model
from api.services import predict as predict_services

router = APIRouter(prefix="/jobs", tags=["predict"])
ERRORS = {code: {"model": ErrorResponse} for code in (401, 404, 409, 422, 429, 500, 504)} | {
    400: {"model": ErrorResponse, "description": "The body cannot be decoded"},
    413: {"model": ErrorResponse, "description": "Body over the configured size"},
}


@router.post(
    "/{job_id}/predict",
    response_model=LabelList | Generation,
    responses=ERRORS,  # type: ignore[arg-type]
    summary="Classify texts or continue a prompt with a job's trained model",
    description='A classifier: `{"inputs": [...]}` gives one label, score and per-label '
    'probabilities per input, in order. A causal LM: `{"prompt": ...}` or '
    '`{"messages": [...]}` (with `max_new_tokens` ≤ 512, `temperature`, `seed`) gives '
    '`{"text"}` (and, for messages, the assistant `message`). The succeeded job\'s model/, or '
    "a kept checkpoint (`checkpoint`: its step). A worker answers from its loaded models; none "
    "within GRADACC_SERVE_TIMEOUT_S is a 504; more than GRADACC_MAX_PREDICTS_PER_TENANT "
    "requests of one tenant waiting at once is a 429.",
)
async def predict(
    job_id: str, body: PredictRequest, request: Request, settings: SettingsDep, tenant: TenantDep
) -> Response:
    sessions = request.app.state.sessionmaker

    def queue() -> str:
        with sessions() as session:
            return predict_services.queue_prediction(
                session, settings, job_id=job_id, tenant=tenant, body=body
            )

    prediction_id = await run_in_threadpool(queue)
    answer = await predict_services.wait_for_answer(sessions, settings, prediction_id)
    model = answer_model(body.kind, answer)
    return Response(model.model_dump_json(exclude_none=True), media_type="application/json")
