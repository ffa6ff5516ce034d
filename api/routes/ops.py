"""/metrics: Prometheus's text format (``api.http.prometheus``). Aggregates only (docs/security.md);
with ``GRADACC_METRICS_TOKEN`` set, a scrape needs ``Authorization: Bearer <that token>``."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import ReadEngineDep, SettingsDep
from api.http.auth_gate import bearer_token
from api.http.prometheus import build_registry
from gradacc.errors import Unauthorized

router = APIRouter(tags=["operations"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}, 401: {"description": "Token required"}},
)
def metrics(request: Request, engine: ReadEngineDep, settings: SettingsDep) -> Response:
    """Jobs by status, queue depth, running jobs, job duration and time-to-start histograms,
    training samples/s, HTTP latency by route: over the whole server, never per tenant or job."""
    expected = settings.metrics_token
    if expected is not None:
        given = bearer_token(request.scope) or ""
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise Unauthorized("/metrics needs Bearer <GRADACC_METRICS_TOKEN>")
    registry = build_registry(engine, settings.prometheus_multiproc_dir)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
