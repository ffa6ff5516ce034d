"""``gradacc serve`` on the embedded stack, signalled like Docker, systemd or ``kill`` do: SIGTERM
stops the API and the workers, a running job is preempted and released at once, no process is
left behind; after a restart the job resumes (not after a stale period) and succeeds. Along the
way: /readyz and GET /v1/workers show the real worker, and the default log stays quiet.

The first serve starts as in production (its whole process tree is what SIGTERM must end); the
restart, which proves only the resume, forks its fork server from the test process's zygote and
starts no predict server (a cold fork server and a predict server fewer, 2026-12-05)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from sqlalchemy import func, select

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Worker
from tests.conftest import ROOT, TINY
from tests.e2e.conftest import NO_PREDICT, settings_env, without_zygote
from tests.support import Hold, free_port, wait_for, wait_ready

# 2 epochs of 4 steps; held at step 3 until the signal has done its work (no race on a job
# that a fast or busy machine finishes first).
JOB = {**TINY, "num_train_epochs": 2}
HOLD_STEP = 3


def start_serve(
    settings: Settings, port: int, log: Path, env: dict[str, str], *, production: bool = True
) -> subprocess.Popen[bytes]:
    """``production``: the fork server started as a fresh interpreter, as users get it;
    otherwise forked from the zygote, without a predict server."""
    argv = [sys.executable, "-m", "commands.cli", "serve", "--port", str(port), "--workers", "1"]
    base = settings_env(settings)
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            cwd=ROOT,
            env=(without_zygote(base) if production else base | NO_PREDICT) | env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@pytest.fixture
def settings(tmp_path: Path) -> Iterator[Settings]:
    yield Settings(home=tmp_path / "home")


@pytest.mark.integration
def test_sigterm_leaves_nothing_and_the_job_resumes(settings: Settings, tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "serve.log"
    hold = Hold(tmp_path, HOLD_STEP)
    serve = start_serve(settings, port, log, hold.env())
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        wait_ready(client, timeout_s=180)  # 200 only once a worker is alive
        ready = client.get("/readyz").json()
        assert ready["checks"]["workers"] == "1 alive", ready
        workers = client.get("/v1/workers").json()["data"]
        assert len(workers) == 1 and "cpu" in workers[0]["devices"], workers
        job_id = client.post("/v1/jobs", json=JOB).json()["id"]
        hold.held(timeout=240, process=serve)
        assert client.get("/v1/workers").json()["data"][0]["current_job"] == job_id
        family = psutil.Process(serve.pid).children(recursive=True)
        assert len(family) >= 3, family  # the worker, its fork server, the training process
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=90) == 0, log.read_text()[-3000:]
        _, alive = psutil.wait_procs(family, timeout=30)
        assert not alive, [(p.pid, p.cmdline()) for p in alive]
    finally:
        if serve.poll() is None:
            serve.kill()
    text = log.read_text()
    with session_scope(settings) as session:
        assert session.scalar(select(func.count()).select_from(Worker)) == 0  # unregistered
    assert "alembic" not in text and "celery@" not in text and "superuser" not in text, text
    assert "API ready on" in text and "ready" in text and job_id in text, text
    assert len(text.splitlines()) < 20, text

    hold.release()
    restarted_at = time.monotonic()
    serve = start_serve(settings, port, log, hold.env(), production=False)
    try:
        wait_ready(client, timeout_s=180)
        job = wait_for(
            client, job_id, lambda j: j["status"] in ("succeeded", "failed"), timeout=240
        )
        assert job["status"] == "succeeded", job
        listed = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
        events = [e["kind"] for e in listed]
        assert "preempted" in events and "released" in events, listed
        resumed = [e["message"] for e in listed if "resumed at step" in e["message"]]
        assert resumed and f"resumed at step {HOLD_STEP}" in resumed[0], listed
        print([(e["kind"], e["message"]) for e in listed])
        assert job["attempts"] == 2, [
            (e["kind"], e["message"]) for e in listed
        ]  # claimed once before the restart, once after
        print(f"restart to success: {time.monotonic() - restarted_at:.1f} s; events {events}")
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=90)
        client.close()
