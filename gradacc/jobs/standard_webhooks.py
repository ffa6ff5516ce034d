"""Standard Webhooks signatures (standardwebhooks.com), the scheme of OpenAI's webhooks that the
openai SDK's ``client.webhooks.unwrap`` verifies. Headers::

    webhook-id: <message id, the same on every retry of one delivery>
    webhook-timestamp: <unix seconds>
    webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>

The key is the tenant's secret ``whsec_<base64>`` decoded from base64, as the SDK decodes it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import uuid

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A tenant's secret: ``whsec_`` and 32 random bytes in standard base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def signing_key(secret: str) -> bytes | None:
    """The key a verifier derives from ``secret`` (exactly as the openai SDK does), or None where
    it cannot: a secret made before secrets were standard base64 (``whsec_`` + URL-safe text,
    which mostly fails to decode) signs ``Gradacc-Signature`` only."""
    if not secret.startswith(SECRET_PREFIX):
        return secret.encode()
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    except (binascii.Error, ValueError):
        return None


def message_id(job_id: str, delivery_id: int) -> str:
    """One delivery's id, the same on each of its attempts (a receiver drops repeats by it)."""
    return "evt_" + uuid.uuid5(uuid.NAMESPACE_URL, f"gradacc:{job_id}/{delivery_id}").hex


def standard_headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers (no ``webhook-signature`` where the secret has no key, see above)."""
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(timestamp)}
    key = signing_key(secret)
    if key is not None:
        signed = f"{msg_id}.{timestamp}.".encode() + body
        digest = hmac.new(key, signed, hashlib.sha256).digest()
        headers["webhook-signature"] = "v1," + base64.b64encode(digest).decode()
    return headers
