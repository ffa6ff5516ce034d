"""The Tinker API (``/api/v1``, docs/tinker.md): what the stock ``tinker`` SDK calls, with
gradacc's keys sent as ``X-API-Key: tml-<key>``. Calls that train or sample return a future;
``retrieve_future`` waits for its answer up to ``tinker_poll_wait_s`` and then says "try again"."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse

from api.deps import ReadSessionDep, SessionDep, SettingsDep, TenantDep
from api.services import tinker as services
from api.services import tinker_runs as runs
from api.services import tinker_sampling as sampling
from gradacc.errors import ObjectNotFound
from gradacc.tinker import names, queue

# The SDK defines this contract (docs/tinker-protocol.md), not the OpenAPI schema: left out of it.
router = APIRouter(prefix="/api/v1", tags=["tinker"], include_in_schema=False)
Json = dict[str, Any]
JsonBody = Annotated[Json, Body()]
OptionalBody = Annotated[Json | None, Body()]
POLL_FIRST_S, POLL_S = 0.002, 0.05  # a future's database reads: every 2 ms, doubling to 50 ms
PLACE_EVERY_S = 1.0


@router.post("/client/config")
def client_config() -> Json:
    # Plain httpx (pyqwest is for Tinker's own edge), no JWT, no server-side features.
    return {"use_pyqwest_transport": False, "pjwt_auth_enabled": False}


@router.post("/client/dynamic_config")
def dynamic_config() -> Json:
    return {}


@router.get("/healthz")
def healthz() -> Json:
    return {"status": "ok"}


@router.post("/telemetry")
def telemetry() -> Json:
    return {"status": "accepted"}


@router.get("/get_server_capabilities")
def capabilities() -> Json:
    return {"supported_models": names.capabilities()}


@router.post("/create_session")
def create_session(
    session: SessionDep, settings: SettingsDep, tenant: TenantDep, body: JsonBody
) -> Json:
    return services.create_session(session, settings, tenant, body)


@router.post("/session_heartbeat")
def heartbeat(session: SessionDep, tenant: TenantDep, body: JsonBody) -> Json:
    return services.heartbeat(session, tenant, body)


@router.post("/sessions/{session_id}/finish")
def finish(
    session_id: str, session: SessionDep, tenant: TenantDep, body: OptionalBody = None
) -> Json:
    return services.finish(session, tenant, session_id, body or {})


@router.post("/create_model")
def create_model(
    session: SessionDep, settings: SettingsDep, tenant: TenantDep, body: JsonBody
) -> Json:
    return services.create_model(session, settings, tenant, body)


@router.post("/get_info")
def get_info(session: ReadSessionDep, tenant: TenantDep, body: JsonBody) -> Json:
    return services.get_info(session, tenant, body)


@router.post("/forward_backward")
async def forward_backward(request: Request, session: SessionDep, tenant: TenantDep) -> Json:
    raw = await request.body()
    encoding = request.headers.get("content-encoding", "")
    return await run_in_threadpool(services.forward_backward, session, tenant, raw, encoding)


@router.post("/optim_step")
def optim_step(session: SessionDep, tenant: TenantDep, body: JsonBody) -> Json:
    return services.model_call(session, tenant, "optim_step", body)


@router.post("/save_weights")
def save_weights(session: SessionDep, tenant: TenantDep, body: JsonBody) -> Json:
    return services.model_call(session, tenant, "save_weights", body)


@router.post("/save_weights_for_sampler")
def save_for_sampler(session: SessionDep, tenant: TenantDep, body: JsonBody) -> Json:
    return services.model_call(session, tenant, "save_weights_for_sampler", body)


@router.post("/save_weights_external")
def save_external(session: SessionDep, tenant: TenantDep, body: JsonBody) -> Json:
    return services.model_call(session, tenant, "save_weights_external", body)


@router.post("/load_weights")
def load_weights(session: SessionDep, tenant: TenantDep, body: JsonBody) -> Json:
    if body.get("model_id") is None:  # create_training_client_from_state
        return services.create_via_load(session, tenant, body)
    return services.model_call(session, tenant, "load_weights", body)


@router.post("/create_sampling_session")
def create_sampling_session(
    session: SessionDep, settings: SettingsDep, tenant: TenantDep, body: JsonBody
) -> Json:
    return sampling.create_sampling_session(session, settings, tenant, body)


@router.get("/samplers/{sampler_id}")
def sampler(sampler_id: str, session: ReadSessionDep, tenant: TenantDep) -> Json:
    return sampling.sampler_info(session, tenant, sampler_id)


@router.post("/asample")
def asample(session: SessionDep, tenant: TenantDep, body: JsonBody) -> Json:
    return sampling.asample(session, tenant, body)


@router.post("/retrieve_future")
async def retrieve_future(
    request: Request, settings: SettingsDep, tenant: TenantDep, body: JsonBody
) -> Response:
    """The answer when it is ready; else, after ``tinker_poll_wait_s``, ``try_again`` (the SDK
    polls again at once, so the wait is here). A failed call is a 200 with ``error``."""
    request_id = str(body.get("request_id", ""))
    sessions = request.app.state.read_sessionmaker
    until = time.monotonic() + settings.tinker_poll_wait_s
    pause, placed_at = POLL_FIRST_S, 0.0
    while True:
        found = await run_in_threadpool(_answer, sessions, tenant, request_id)
        if found is None:
            raise ObjectNotFound("future", request_id, param="request_id")
        if found.session_id is not None and not found.held and time.monotonic() > placed_at:
            # No host holds its model: its session gets a host job unless one is queued or
            # running (checked again each second: a host may end just as the call comes).
            app = request.app.state
            await run_in_threadpool(
                services.place, app.sessionmaker, app.celery, settings, found.session_id
            )
            placed_at = time.monotonic() + PLACE_EVERY_S
        if (
            found.status != "pending"
            or time.monotonic() >= until
            or await request.is_disconnected()
        ):
            break
        await asyncio.sleep(pause)
        pause = min(pause * 2, POLL_S)
    if found.status == "pending":  # no worker free to hold its model: the SDK tells the user
        state = "active" if found.held else "paused_capacity"
        return JSONResponse({"type": "try_again", "request_id": request_id, "queue_state": state})
    media = "application/x-protobuf" if found.result_type == "proto" else "application/json"
    return Response(content=found.result or b"{}", media_type=media)


def _answer(sessions: Any, tenant: str, request_id: str) -> queue.Answer | None:
    with sessions() as session:
        return queue.answer(session, tenant=tenant, request_id=request_id)


@router.get("/training_runs")
def training_runs(
    session: ReadSessionDep, tenant: TenantDep, limit: int = 20, offset: int = 0
) -> Json:
    return runs.list_runs(session, tenant, limit=limit, offset=offset)


@router.get("/training_runs/{run_id}")
def training_run(run_id: str, session: ReadSessionDep, tenant: TenantDep) -> Json:
    return runs.get_run(session, tenant, run_id)


@router.get("/training_runs/{run_id}/checkpoints")
def run_checkpoints(run_id: str, session: ReadSessionDep, tenant: TenantDep) -> Json:
    return runs.list_checkpoints(session, tenant, run_id)


@router.get("/checkpoints")
def checkpoints(
    session: ReadSessionDep, tenant: TenantDep, limit: int = 100, offset: int = 0
) -> Json:
    return runs.list_checkpoints(session, tenant, None, limit=limit, offset=offset)


@router.get("/training_runs/{run_id}/checkpoints/external_weights/{name}/external_weights_urls")
def external_urls(
    run_id: str, name: str, request: Request, session: SessionDep, tenant: TenantDep
) -> Json:
    return runs.external_urls(session, tenant, str(request.base_url), run_id, name)


@router.put("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}/ttl")
def checkpoint_ttl(
    run_id: str, checkpoint_id: str, session: SessionDep, tenant: TenantDep, body: JsonBody
) -> Json:
    return runs.set_ttl(session, tenant, run_id, checkpoint_id, body.get("ttl_seconds"))


@router.delete("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}")
def delete_checkpoint(
    run_id: str, checkpoint_id: str, session: SessionDep, tenant: TenantDep
) -> Json:
    return runs.delete_checkpoint(session, tenant, run_id, checkpoint_id)


@router.post("/weights_info")
def weights_info(session: ReadSessionDep, tenant: TenantDep, body: JsonBody) -> Json:
    return runs.weights_info(session, tenant, str(body.get("tinker_path", "")))


downloads = APIRouter(tags=["tinker"], include_in_schema=False)


@downloads.get(runs.DOWNLOADS + "/{token}/{relative:path}")
def download(token: str, relative: str, session: ReadSessionDep) -> FileResponse:
    """An export's file, by the token of its URL (no key: the SDK's downloaders send none)."""
    return FileResponse(runs.download(session, token, relative))
