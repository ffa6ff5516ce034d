"""Webhooks, the kernel's part: which URLs may be called, the outbox rows, tenants' secrets and
the signature. The API process sends them (``api.webhooks``).

Every webhook carries two signatures with the tenant's secret: ours, Stripe's scheme, header
``Gradacc-Signature: t=<unix seconds>,v1=<hex>``, where hex = HMAC-SHA256(tenant secret,
f"{t}.{body}"); and Standard Webhooks' (``gradacc.jobs.standard_webhooks``), which the openai SDK
verifies. A receiver recomputes one over the raw body and refuses old timestamps (replays).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from urllib.parse import urlsplit

from sqlalchemy import case, insert, literal, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gradacc.errors import InvalidRequest
from gradacc.jobs.standard_webhooks import new_secret
from gradacc.settings import Settings
from gradacc.tables import FINE_TUNING_API, Job, UTCDateTime, WebhookDelivery, WebhookSecret, utcnow

SIGNATURE_HEADER = "Gradacc-Signature"


def check_webhook_url(url: str, settings: Settings, *, param: str = "webhook_url") -> str:
    """Raise ``InvalidRequest`` unless ``url`` is http(s), its host is allowed, and every address
    it resolves to is public (private, loopback, link-local and the like only when
    ``webhook_allow_private``): the server must not be made to call its own network. Returns the
    address checked, for the caller to connect to: resolving the name again at connection time
    would let a DNS answer that changed in between (rebinding) reach a private address."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest("must be an http:// or https:// URL with a host", param=param)
    if parts.username or parts.password:
        raise InvalidRequest("must not carry credentials", param=param)
    host = parts.hostname.lower()
    allowed = settings.webhook_allowed_host_list()
    if allowed is not None and host not in allowed:
        raise InvalidRequest(
            f"host {host!r} is not in the allowed webhook hosts (GRADACC_WEBHOOK_ALLOWED_HOSTS)",
            param=param,
        )
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:
        raise InvalidRequest(f"host {host!r} does not resolve", param=param) from exc
    addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    if not settings.webhook_allow_private and not all(_public(a) for a in addresses):
        raise InvalidRequest(
            f"host {host!r} is a private or loopback address; refused (an operator allows "
            "private receivers with GRADACC_WEBHOOK_ALLOW_PRIVATE=true)",
            param=param,
        )
    return str(addresses[0])


# Global by the registry, yet they lead to an IPv4 address where the host has a NAT64 gateway or a
# 6to4 relay (64:ff9b::7f00:1 is 127.0.0.1 there): refused rather than trusted to be absent.
_TRANSLATED = (
    ipaddress.ip_network("64:ff9b::/96"),
    ipaddress.ip_network("64:ff9b:1::/48"),
    ipaddress.ip_network("2002::/16"),
)


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return address.is_global and not any(address in net for net in _TRANSLATED)


def queue_webhook(session: Session, *, job_id: str, event: str, epoch_only: bool = False) -> None:
    """Add an outbox row if the job has a webhook (and, for ``epoch_only``, wants epochs). Does
    not commit: it goes with the change it reports."""
    wanted = (Job.id == job_id) & Job.webhook_url.is_not(None)
    if epoch_only:
        wanted &= Job.webhook_on_epoch.is_(True)
    now = literal(utcnow(), UTCDateTime())
    # A fine-tuning job's events carry OpenAI's names: fine_tuning.job.succeeded, ...
    named = case(
        (Job.api == FINE_TUNING_API, literal(f"fine_tuning.{event}")), else_=literal(event)
    )
    rows = select(Job.id, named, literal("pending"), literal(0), now, now).where(wanted)
    columns = ["job_id", "event", "status", "attempts", "next_attempt_at", "created_at"]
    session.execute(insert(WebhookDelivery).from_select(columns, rows))


def tenant_secret(session: Session, *, tenant: str) -> str:
    """The tenant's signing secret, created on first use. Commits when it creates one."""
    found = session.get(WebhookSecret, tenant)
    if found is not None:
        return found.secret
    secret = new_secret()
    session.add(WebhookSecret(tenant=tenant, secret=secret))
    try:
        session.commit()
    except IntegrityError:  # another process created it first: use that one
        session.rollback()
        return session.get(WebhookSecret, tenant).secret  # type: ignore[union-attr]
    return secret


def rotate_secret(session: Session, *, tenant: str) -> str:
    """A new secret for the tenant, replacing its old one (which no longer signs). Commits."""
    secret = new_secret()
    session.merge(WebhookSecret(tenant=tenant, secret=secret))
    session.commit()
    return secret


def sign(secret: str, body: bytes, timestamp: int) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def verify(secret: str, body: bytes, header: str, *, now: int, tolerance_s: int = 300) -> bool:
    """What a receiver does (and the tests): the signature matches and is recent."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    expected = sign(secret, body, timestamp).split("v1=", 1)[1]
    fresh = abs(now - timestamp) <= tolerance_s
    return fresh and hmac.compare_digest(expected, fields.get("v1", ""))
