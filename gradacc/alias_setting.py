"""Model aliases: an old name an application still calls (``ft:gpt-4o-mini-2024-07-18:acme::AbC``,
``gpt-4o*``) answered by a model of this server, so a team moving here changes only its
``base_url`` and key (docs/serving.md, "Aliases").

Two sources, a tenant's own first: the aliases a tenant sets through ``/v1/aliases`` (table
``model_aliases``), then the operator's ``GRADACC_SERVE_ALIASES``, a JSON object from a tenant
(or ``*``, every tenant) to ``{pattern: model}``. A pattern is an exact name, a ``prefix*`` glob or
``*``; the most specific wins (exact, then the longest prefix), as in ``GRADACC_SERVE_UPSTREAMS``.
An alias is followed once: what it names is a model of this server or an upstream route, checked
for the tenant when the request comes, as if the client had written it.

Example:
    >>> aliases = parse_aliases('{"*": {"gpt-4o*": "builtin:tiny-chat"}}')
    >>> aliases.lookup("acme", "gpt-4o-mini-2024-07-18")
    'builtin:tiny-chat'
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

SETTING = "GRADACC_SERVE_ALIASES"
ANY = "*"
MAX_NAME = 512


def best_match(name: str, patterns: Iterable[str]) -> str | None:
    """The most specific pattern for ``name``: itself, then the longest ``prefix*``."""
    best: str | None = None
    for pattern in patterns:
        if pattern == name:
            return pattern
        prefix = pattern.removesuffix(ANY)
        longer = best is None or len(prefix) > len(best) - 1
        if pattern.endswith(ANY) and name.startswith(prefix) and longer:
            best = pattern
    return best


@dataclass(frozen=True)
class Aliases:
    """The operator's: tenant (or ``*``) -> pattern -> model."""

    by_tenant: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def lookup(self, tenant: str, name: str) -> str | None:
        for scope in (tenant, ANY):
            table = self.by_tenant.get(scope) or {}
            if (pattern := best_match(name, table)) is not None:
                return table[pattern]
        return None

    def of(self, tenant: str) -> dict[str, str]:
        """The operator's aliases that apply to ``tenant`` (its own over every tenant's)."""
        return dict(self.by_tenant.get(ANY) or {}) | dict(self.by_tenant.get(tenant) or {})


def parse_aliases(raw: str | None) -> Aliases:
    """The setting's JSON; ``ValueError`` naming the setting and the entry at fault."""
    if raw is None or not raw.strip():
        return Aliases()
    try:
        given = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{SETTING} is not JSON: {exc}") from None
    if not isinstance(given, dict):
        raise ValueError(f'{SETTING}: an object {{tenant or "*": {{pattern: model}}}}')
    for tenant, table in given.items():
        if not isinstance(table, dict):
            raise ValueError(f"{SETTING}[{tenant!r}]: an object {{pattern: model}}")
        for pattern, model in table.items():
            if not pattern or len(pattern) > MAX_NAME or ANY in pattern.removesuffix(ANY):
                raise ValueError(f"{SETTING}[{tenant!r}][{pattern!r}]: a name, 'prefix*' or '*'")
            if not isinstance(model, str) or not model.strip() or len(model) > MAX_NAME:
                raise ValueError(f"{SETTING}[{tenant!r}][{pattern!r}]: a model name")
    return Aliases(given)
