"""/v1/webhook_secret: the key a tenant's receivers verify webhooks with (``Gradacc-Signature``,
and Standard Webhooks' ``webhook-signature`` that the openai SDK's ``webhooks.unwrap`` checks)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import SessionDep, TenantDep
from api.schemas.jobs import ErrorResponse, WebhookSecretRead
from gradacc.jobs.webhook_outbox import rotate_secret, tenant_secret

router = APIRouter(tags=["webhooks"], responses={401: {"model": ErrorResponse}})


@router.get("/webhook_secret", response_model=WebhookSecretRead)
def get_webhook_secret(session: SessionDep, tenant: TenantDep) -> WebhookSecretRead:
    """This tenant's webhook signing secret (created on first call)."""
    return WebhookSecretRead(secret=tenant_secret(session, tenant=tenant))


@router.post("/webhook_secret/rotate", response_model=WebhookSecretRead)
def rotate_webhook_secret(session: SessionDep, tenant: TenantDep) -> WebhookSecretRead:
    """A new secret for this tenant; the old one stops signing at once. A secret made before
    secrets were standard base64 is rotated to get ``webhook-signature`` (Standard Webhooks)."""
    return WebhookSecretRead(secret=rotate_secret(session, tenant=tenant))
