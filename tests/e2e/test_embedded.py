"""End to end on the embedded defaults: ``gradacc serve --workers 2`` with SQLite and the
filesystem broker, talked to over real HTTP. One server for the module (its start-up, two workers
and their fork servers, is most of the cost): it trains every backend, then restarts the workers
killed under it, then stops on SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gradacc.settings import Settings
from tests.conftest import ROOT, TINY
from tests.e2e.conftest import NO_PREDICT, settings_env
from tests.support import free_port, wait_final, wait_ready

# Starts real worker processes and trains real (tiny) models.
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[httpx.Client, Path, subprocess.Popen[bytes]]]:
    tmp_path = tmp_path_factory.mktemp("embedded")
    home = tmp_path / "home"
    env = settings_env(Settings(home=home)) | NO_PREDICT  # nothing here predicts
    for name in ("GRADACC_DATABASE_URL", "GRADACC_BROKER_URL", "GRADACC_QUEUE"):
        env.pop(name, None)
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "commands.cli", "serve", "--port", str(port), "--workers", "2"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        try:
            yield client, home, server
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
            log.close()


def test_serve_on_embedded_defaults_trains_every_backend(
    served: tuple[httpx.Client, Path, subprocess.Popen[bytes]],
) -> None:
    client, home, _ = served
    wait_ready(client)
    assert (home / "gradacc.db").is_file(), "serve migrates the embedded database at start"
    jobs = [
        client.post("/v1/jobs", json={**TINY, "backend": backend}).json()
        for backend in ("pytorch", "accelerate", "trainer")
    ]
    queued = client.post("/v1/jobs", json=TINY).json()
    cancelled = client.post(f"/v1/jobs/{queued['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    for job in jobs:
        finished = wait_final(client, job["id"])
        assert finished["status"] == "succeeded", finished
        metrics = client.get(f"/v1/jobs/{job['id']}/metrics").json()["data"]
        assert len(metrics) == 1 and metrics[0]["train_loss"] > 0
        assert finished["metrics"] == metrics[0]
        assert (home / "jobs" / job["id"] / "model").is_dir()
    # Same spec, same seed, same effective batch: the backends agree (exactness, end to end).
    losses = {client.get(f"/v1/jobs/{j['id']}").json()["metrics"]["train_loss"] for j in jobs}
    assert max(losses) - min(losses) < 1e-4, losses
    assert client.get(f"/v1/jobs/{queued['id']}").json()["attempts"] == 0


def _worker_pids(server: subprocess.Popen[bytes]) -> set[int]:
    """The serve process's direct children: its worker processes (uvicorn runs in-process)."""
    found = subprocess.run(
        ["pgrep", "-P", str(server.pid)], capture_output=True, text=True, check=False
    )
    return {int(pid) for pid in found.stdout.split()}


def test_serve_restarts_a_worker_that_dies(
    served: tuple[httpx.Client, Path, subprocess.Popen[bytes]],
) -> None:
    """Both workers killed at once: serve starts two new ones, which train; SIGINT then stops
    the whole server cleanly (exit 0)."""
    client, _, server = served
    wait_ready(client)
    first = _worker_pids(server)
    assert len(first) == 2
    for pid in first:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while len(_worker_pids(server) - first) < 2:
        assert time.monotonic() < deadline, "serve did not restart its dead workers"
        time.sleep(0.2)
    job = wait_final(client, client.post("/v1/jobs", json=TINY).json()["id"], timeout=120)
    assert job["status"] == "succeeded"
    server.send_signal(signal.SIGINT)
    assert server.wait(timeout=60) == 0
