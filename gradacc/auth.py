"""API keys: a random bearer token shown once; the database keeps only its sha256 and tenant."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradacc.tables import ApiKey

KEY_PREFIX = "gak_"
TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def hash_key(token: str) -> str:
    # A 256-bit random token needs no slow hash: there is nothing to brute-force.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def create_api_key(session: Session, *, tenant: str) -> str:
    """Store a new key for ``tenant`` and return the token (the only time it is seen). Commits."""
    if not TENANT_NAME.match(tenant):
        raise ValueError("a tenant name is 1-64 letters, digits, '_', '.' or '-'")
    token = KEY_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(key_hash=hash_key(token), tenant=tenant))
    session.commit()
    return token


def tenant_of_key(session: Session, *, token: str) -> str | None:
    query = select(ApiKey.tenant).where(
        ApiKey.key_hash == hash_key(token), ApiKey.revoked_at.is_(None)
    )
    return session.scalar(query)


class KeyCache:
    """The tenants of keys seen in the last ``ttl_s`` seconds, by key hash, so that a poll does not
    pay a database lookup for its key. The price: a key revoked in the database still works for
    up to ``ttl_s`` in each API process. Unknown and revoked keys are never kept."""

    def __init__(
        self, ttl_s: float, max_keys: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.max_keys = max_keys
        self.clock = clock  # a test sets its own: no race with the real seconds
        self._entries: dict[str, tuple[str, float]] = {}  # key hash -> (tenant, expiry)

    def tenant_of(self, new_session: Callable[[], Session], *, token: str) -> str | None:
        key_hash = hash_key(token)
        cached = self._entries.get(key_hash)
        now = self.clock()
        if cached is not None and cached[1] > now:
            return cached[0]
        with new_session() as session:
            tenant = tenant_of_key(session, token=token)
        if tenant is None:
            self._entries.pop(key_hash, None)
            return None
        if len(self._entries) >= self.max_keys:
            self._entries.clear()  # a flood of distinct keys costs lookups, never memory
        self._entries[key_hash] = (tenant, now + self.ttl_s)
        return tenant
