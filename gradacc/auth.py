"""API keys: a random bearer token shown once; the database keeps only its sha256 and tenant."""

from __future__ import annotations

import hashlib
import re
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradacc.models import ApiKey

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
