"""A tenant's model aliases (table ``model_aliases``, set through ``/v1/aliases``) and the name a
request's model resolves to: the tenant's own alias first, then the operator's
(``gradacc.alias_setting``, where the rules are)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradacc.alias_setting import Aliases, best_match
from gradacc.tables import ModelAlias


def tenant_aliases(session: Session, tenant: str) -> dict[str, str]:
    stmt = select(ModelAlias).where(ModelAlias.tenant == tenant)
    return {row.alias: row.model for row in session.scalars(stmt)}


def resolve_alias(session: Session, aliases: Aliases, *, model: str, tenant: str) -> str:
    """The model ``model`` stands for (itself when no alias matches)."""
    own = tenant_aliases(session, tenant)
    if (pattern := best_match(model, own)) is not None:
        return own[pattern]
    return aliases.lookup(tenant, model) or model
