"""/v1/aliases: a tenant sets, lists and removes its own aliases (``gradacc.serving.aliases``).
An alias is checked when set, as a request would be: its model must answer this tenant now."""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.schemas.aliases import AliasObject
from gradacc.alias_setting import ANY
from gradacc.errors import InvalidRequest, ModelNotFound
from gradacc.serving.aliases import tenant_aliases
from gradacc.serving.resolve import resolve_model
from gradacc.settings import Settings
from gradacc.tables import ModelAlias
from trainer_core.spec.fields import BUILTIN_MODELS


def list_aliases(session: Session, settings: Settings, tenant: str) -> list[AliasObject]:
    own = tenant_aliases(session, tenant)
    operator = settings.serve_aliases.of(tenant)
    found = [
        AliasObject(alias=a, model=m, set_by="operator")
        for a, m in operator.items()
        if a not in own
    ]
    found += [AliasObject(alias=a, model=m, set_by="tenant") for a, m in own.items()]
    return sorted(found, key=lambda found: found.alias)


def set_alias(
    session: Session, settings: Settings, *, alias: str, model: str, tenant: str
) -> AliasObject:
    if ANY in alias.removesuffix(ANY) or not alias.strip():
        raise InvalidRequest("a name, a 'prefix*' pattern or '*'", param="alias")
    if alias in BUILTIN_MODELS:
        raise InvalidRequest(f"{alias} is a base model's own name", param="alias")
    if settings.serve_upstreams.match(model) is None:
        try:
            resolve_model(session, settings, model=model, tenant=tenant)
        except ModelNotFound:
            raise ModelNotFound(
                model, hint="an alias names a model this server answers you (GET /v1/models)"
            ) from None
    row = session.get(ModelAlias, (tenant, alias))
    if row is None:
        session.add(ModelAlias(tenant=tenant, alias=alias, model=model))
    else:
        row.model = model
    session.commit()
    return AliasObject(alias=alias, model=model, set_by="tenant")


def delete_alias(session: Session, *, alias: str, tenant: str) -> None:
    row = session.get(ModelAlias, (tenant, alias))
    if row is None:
        raise ModelNotFound(alias)
    session.delete(row)
    session.commit()
