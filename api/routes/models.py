"""/v1/models (OpenAI's): the built-in base models and your fine-tuned ones."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import ReadSessionDep, SessionDep, SettingsDep, TenantDep
from api.schemas.jobs import ErrorResponse
from api.schemas.openai import ModelDeleted, ModelList, ModelObject
from api.services import models as model_services

router = APIRouter(
    prefix="/models",
    tags=["models"],
    responses={401: {"model": ErrorResponse}, 404: {"model": ErrorResponse}},
)


@router.get("", response_model=ModelList, summary="List models")
async def list_models(
    session: ReadSessionDep, settings: SettingsDep, tenant: TenantDep
) -> ModelList:
    """The base models (built in), the fine-tuned models of your succeeded jobs, and the models
    an upstream server answers by exact name (`GRADACC_SERVE_UPSTREAMS`; its globs are not
    listed)."""
    return ModelList(data=model_services.list_models(session, settings, tenant=tenant))


@router.get(
    "/{model:path}",
    response_model=ModelObject,
    summary="Retrieve a model",
    description="A base model, or one of your fine-tuned models (`ft:…`, or a checkpoint's "
    "name); another tenant's is a 404.",
)
async def retrieve_model(
    model: str, session: ReadSessionDep, settings: SettingsDep, tenant: TenantDep
) -> ModelObject:
    return model_services.get_model(session, settings, model=model, tenant=tenant)


@router.delete(
    "/{model:path}",
    response_model=ModelDeleted,
    responses={403: {"model": ErrorResponse, "description": "A base model"}},
    summary="Delete a fine-tuned model",
)
def delete_model(
    model: str, session: SessionDep, settings: SettingsDep, tenant: TenantDep
) -> ModelDeleted:
    """Its weights go; the job, its metrics and its checkpoints' records stay."""
    model_services.delete_model(session, settings, model=model, tenant=tenant)
    return ModelDeleted(id=model)
