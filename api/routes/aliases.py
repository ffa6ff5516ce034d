"""/v1/aliases: old model names a tenant's applications call, answered by models of this server
(chat completions, completions and responses follow them). docs/serving.md, "Aliases"."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.deps import ReadSessionDep, SessionDep, SettingsDep, TenantDep
from api.schemas.aliases import AliasList, AliasObject, AliasSet
from api.schemas.jobs import ErrorResponse
from api.services import aliases as alias_services
from gradacc.alias_setting import MAX_NAME

PATTERN = r"^[^*]+\*?$|^\*$"  # a name, "prefix*" or "*"

router = APIRouter(
    prefix="/aliases",
    tags=["models"],
    responses={
        400: {"model": ErrorResponse},
        401: {"model": ErrorResponse},
        404: {"model": ErrorResponse},
    },
)


@router.get("", response_model=AliasList, summary="List your model aliases")
def list_aliases(session: ReadSessionDep, settings: SettingsDep, tenant: TenantDep) -> AliasList:
    """Yours, and the operator's (GRADACC_SERVE_ALIASES) that apply to you; yours win."""
    return AliasList(data=alias_services.list_aliases(session, settings, tenant))


@router.put("/{alias:path}", response_model=AliasObject, summary="Set a model alias")
def set_alias(
    alias: Annotated[str, Path(pattern=PATTERN, max_length=MAX_NAME)],
    body: AliasSet,
    session: SessionDep,
    settings: SettingsDep,
    tenant: TenantDep,
) -> AliasObject:
    """Requests naming `alias` (a name such as `ft:gpt-4o-mini-2024-07-18:acme::AbC123`, or a
    `prefix*` pattern) are answered by `model`, which must answer you now."""
    return alias_services.set_alias(session, settings, alias=alias, model=body.model, tenant=tenant)


@router.delete("/{alias:path}", response_model=AliasList, summary="Remove a model alias")
def delete_alias(
    alias: str, session: SessionDep, settings: SettingsDep, tenant: TenantDep
) -> AliasList:
    """Your aliases left, with the operator's."""
    alias_services.delete_alias(session, alias=alias, tenant=tenant)
    return AliasList(data=alias_services.list_aliases(session, settings, tenant))
