"""The dashboard: ``/`` is its page, ``/static`` its assets (shipped with the package; no CDN,
no build step). It talks to the API like any client."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

router = APIRouter(include_in_schema=False)


@router.get("/")
async def dashboard() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


@router.get("/evals")
async def evals_page() -> FileResponse:
    """Your evals, their runs' progress, and two runs compared item by item."""
    return FileResponse(STATIC_DIR / "evals.html", media_type="text/html")
