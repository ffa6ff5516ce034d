"""The API keeps the contract its OpenAPI document states, as judged by an independent fuzzer:
schemathesis (all checks: no 5xx, every status and body declared, schema-valid input accepted,
invalid input refused, 405s with ``Allow``, auth not ignored) against a live uvicorn, on both
stacks: the embedded one without keys, PostgreSQL + Redis with keys required (with a key, and
without one). Any finding fails the test. Bounded: a few seconds of generation per pass.

The server runs no worker (it would train whatever the fuzzer submits), and its working
directory is empty, so no generated hub-id-like name happens to be a local path.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from gradacc.auth import create_api_key
from gradacc.db import get_engine, session_scope
from gradacc.settings import Settings
from tests.conftest import ROOT, migrate, unique_queue
from tests.e2e.conftest import forget_queue, settings_env
from tests.support import free_port, wait_until

CONFIG = Path(__file__).with_name("schemathesis.toml")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
OPERATIONS = "72 selected"  # every route the API declares; a new route must raise it


def serve_api(settings: Settings, cwd: Path, env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    env = settings_env(settings) | env | {"PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "uvicorn", "api.main:app", "--port", str(port)]
    with (cwd / "uvicorn.log").open("wb") as log:
        server = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def alive() -> bool:
        assert server.poll() is None, (cwd / "uvicorn.log").read_text()[-3000:]
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(alive, timeout=30, what="uvicorn's /healthz", every=0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=20)


def fuzz(base: str, *, seconds: int, examples: int, headers: list[str], cwd: Path) -> str:
    """One bounded schemathesis pass; fails with its report on any finding."""
    argv = [str(SCHEMATHESIS), "--config-file", str(CONFIG), "run", f"{base}/openapi.json"]
    # Every check runs (schemathesis' default, spelled out in CONFIG); ``--checks all`` on the
    # command line would override CONFIG's one per-operation exception.
    argv += ["-n", str(examples), "--max-time", str(seconds), "-w", "1"]
    argv += ["--suppress-health-check", "all", "--seed", "11", "--no-color"]
    for header in headers:
        argv += ["-H", header]
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=seconds + 120)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    generated = re.search(r"(\d+) generated", report)
    print(f"schemathesis {base}: {generated.group(0) if generated else '?'}")
    return report


@pytest.mark.integration
def test_embedded_stack_keeps_its_contract(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    settings.home.mkdir()
    migrate(settings.resolved_database_url())
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for base in serve_api(settings, cwd, {}):
        report = fuzz(base, seconds=12, examples=15, headers=[], cwd=cwd)
        assert OPERATIONS in report  # every operation: the workers list, stream, /metrics too


@pytest.mark.integration
def test_pg_redis_stack_with_keys_keeps_its_contract(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    settings = Settings(
        home=tmp_path / "home", database_url=pg_url, broker_url=redis_url, queue=unique_queue()
    )
    with session_scope(settings) as session:
        key = create_api_key(session, tenant="fuzz")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    try:
        for base in serve_api(settings, cwd, {"GRADACC_REQUIRE_AUTH": "true"}):
            headers = [f"Authorization: Bearer {key}"]
            report = fuzz(base, seconds=12, examples=15, headers=headers, cwd=cwd)
            assert OPERATIONS in report  # every operation, as on the embedded stack
            # Without a key every /v1 answer must be the declared 401, whatever was sent.
            fuzz(base, seconds=5, examples=5, headers=[], cwd=cwd)
    finally:
        forget_queue(redis_url, settings.queue)
        with get_engine(pg_url).begin() as connection:
            connection.execute(text("TRUNCATE jobs CASCADE"))
