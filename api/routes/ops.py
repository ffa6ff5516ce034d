"""/metrics: Prometheus's text format (``api.prometheus``)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import ReadEngineDep, SettingsDep
from api.prometheus import build_registry

router = APIRouter(tags=["operations"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(engine: ReadEngineDep, settings: SettingsDep) -> Response:
    """Jobs by status, queue depth, running jobs, job duration and time-to-start histograms,
    training samples/s, HTTP latency by route."""
    registry = build_registry(engine, settings.prometheus_multiproc_dir)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
