"""/v1/fine_tuning/alpha/graders: OpenAI's try-a-grader API (``client.fine_tuning.alpha.graders``).
A bad grader is a 400 whose ``param`` is the field's path (``grader.graders.a.operation``)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.deps import ReadSessionDep, SettingsDep, TenantDep
from api.schemas.graders import (
    GraderRunRequest,
    GraderRunResponse,
    GraderValidateRequest,
    GraderValidateResponse,
)
from api.schemas.jobs import ErrorResponse
from api.services import graders as grader_services

router = APIRouter(
    prefix="/fine_tuning/alpha/graders",
    tags=["fine-tuning"],
    responses={
        400: {"model": ErrorResponse, "description": "error.param names the field"},
        401: {"model": ErrorResponse},
        413: {"model": ErrorResponse},
        415: {"model": ErrorResponse},
        429: {
            "model": ErrorResponse,
            "description": "Over the tenant's or the server's share of "
            "grader runs; param names the setting",
        },
    },
)


@router.post(
    "/run",
    response_model=GraderRunResponse,
    summary="Run a grader on one sample",
    description="The reward, each sub-grader's, and the errors by kind (a failed "
    "grader scores 0), graded as a reinforcement job would; a model grader's model that does "
    "not answer for the caller is a 400 naming it. docs/reinforcement.md.",
)
async def run_grader(
    body: GraderRunRequest, request: Request, settings: SettingsDep, tenant: TenantDep
) -> GraderRunResponse:
    return await grader_services.run(
        request.app.state.sessionmaker,
        settings,
        body=body,
        tenant=tenant,
        gone=request.is_disconnected,
    )


@router.post(
    "/validate",
    response_model=GraderValidateResponse,
    summary="Validate a grader",
    description="The grader as a reinforcement job would take it, or a 400 whose "
    "param is the field at fault (a model grader's model that does not answer for the caller "
    "included).",
)
def validate_grader(
    body: GraderValidateRequest, session: ReadSessionDep, settings: SettingsDep, tenant: TenantDep
) -> GraderValidateResponse:
    return grader_services.validate(session, settings, body=body, tenant=tenant)
