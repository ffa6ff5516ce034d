"""/v1/webhook_secret: the key a tenant's receivers verify ``Gradacc-Signature`` with."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import SessionDep, TenantDep
from api.schemas.jobs import ErrorResponse, WebhookSecretRead
from gradacc.jobs.webhook_outbox import tenant_secret

router = APIRouter(tags=["webhooks"], responses={401: {"model": ErrorResponse}})


@router.get("/webhook_secret", response_model=WebhookSecretRead)
def get_webhook_secret(session: SessionDep, tenant: TenantDep) -> WebhookSecretRead:
    """This tenant's webhook signing secret (created on first call)."""
    return WebhookSecretRead(secret=tenant_secret(session, tenant=tenant))
