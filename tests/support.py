"""Helpers every kind of test shares: waiting (one deadline loop, written once), a free port, a
service that is ready, and holding a running job at a known step (the hold failpoint) so that a
test acts on a job that cannot finish first, however fast or busy the machine."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.jobs.states import new_job_id
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, utcnow
from trainer_core.testing.failpoints import HOLD_AT, held_marker

T = TypeVar("T")
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


def wait_until(
    probe: Callable[[], T | None], *, timeout: float, what: str, every: float = 0.1
) -> T:
    """``probe()`` until it returns something truthy (returned); AssertionError naming ``what``
    after ``timeout`` seconds. A condition to reach, never a timing to assert."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def wait_for(
    client: httpx.Client,
    job_id: str,
    done: Callable[[dict[str, Any]], bool],
    timeout: float = 90,
    *,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Poll the job until ``done(job)``; the job."""
    last: dict[str, Any] = {}

    def probe() -> dict[str, Any] | None:
        nonlocal last
        last = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
        return last if done(last) else None

    try:
        return wait_until(probe, timeout=timeout, what=f"job {job_id}", every=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {last}") from None


def wait_final(
    client: httpx.Client,
    job_id: str,
    timeout: float = 90,
    *,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    return wait_for(client, job_id, lambda job: job["status"] in TERMINAL, timeout, headers=headers)


def event_kinds(
    client: httpx.Client, job_id: str, *, headers: dict[str, str] | None = None
) -> list[str]:
    events = client.get(f"/v1/jobs/{job_id}/events", headers=headers).json()["data"]
    return [e["kind"] for e in events]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(client: httpx.Client, *, timeout_s: float = 180.0, workers: bool = True) -> None:
    """``/readyz`` answers 200 (database, broker and a worker alive). ``workers=False``: an API
    started without workers, for which 503 ``no_workers`` will do. A condition, not a timing: a
    worker is ready once its fork server imported torch at low priority, which took over 60 s
    with two suites at once on 2 cores."""

    def ready() -> bool:
        try:
            answer = client.get("/readyz")
        except httpx.TransportError:
            return False
        if answer.status_code == 200:
            return True
        return not workers and answer.json().get("error", {}).get("code") == "no_workers"

    wait_until(ready, timeout=timeout_s, what="the service's /readyz", every=0.2)


class Hold:
    """Park a job after optimizer step ``step`` until released (``trainer_core.testing.failpoints``).

    Put ``env()`` into the environment of the process that trains (a worker's passes it to its
    jobs), wait for ``held()``, act, then ``release()``. A job that runs again after the release
    (a resume) passes the step without stopping; ``arm()`` holds the next one that gets there."""

    def __init__(self, folder: Path, step: int, *, armed: bool = True) -> None:
        self.gate = folder / f"hold-at-{step}"
        self.step = step
        self.gate.parent.mkdir(parents=True, exist_ok=True)
        if armed:
            self.arm()

    def arm(self) -> None:
        held_marker(self.gate).unlink(missing_ok=True)
        self.gate.touch()

    def env(self) -> dict[str, str]:
        return {HOLD_AT: f"{self.step}:{self.gate}"}

    def held(self, timeout: float = 240, process: subprocess.Popen[bytes] | None = None) -> int:
        """Wait until a run is parked here; the pid it wrote. With ``process``, its exit first
        fails the wait at once (it ended or crashed before the step)."""
        marker = held_marker(self.gate)

        def parked() -> int | None:
            if process is not None and process.poll() is not None:
                raise AssertionError(f"exited with {process.returncode} before step {self.step}")
            return int(marker.read_text() or 0) if marker.exists() else None

        return wait_until(parked, timeout=timeout, what=f"held at step {self.step}", every=0.05)

    def release(self) -> None:
        self.gate.unlink(missing_ok=True)


def checkpoint_at(job_dir: Path, step: int, timeout: float = 60) -> dict[str, Any]:
    """Wait until the job's latest checkpoint (``checkpoint/``) is the one of ``step``; its saved
    state. Checkpoints are written in the background at a low CPU priority: on a busy machine the
    run can be a few steps further (or parked at a hold) before the file lands."""
    state = job_dir / "checkpoint" / "gradacc_state.json"

    def landed() -> dict[str, Any] | None:
        try:
            saved: dict[str, Any] = json.loads(state.read_text())
        except (OSError, ValueError):
            return None
        return saved if saved.get("global_step") == step else None

    return wait_until(landed, timeout=timeout, what=f"the checkpoint of step {step}")


def with_env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", **extra}


JOB_SPEC: dict[str, Any] = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}


def make_job(settings: Settings, **values: Any) -> str:
    """A job row written straight to the database (queued, just enqueued, unless ``values``
    say otherwise); its id."""
    job_id = new_job_id()
    with session_scope(settings) as session:
        fields = {"status": JobStatus.QUEUED, "enqueued_at": utcnow(), "spec": JOB_SPEC} | values
        session.add(Job(id=job_id, effective_batch_size=8, **fields))
        session.commit()
    return job_id


def status_of(settings: Settings, job_id: str) -> str | None:
    with session_scope(settings) as session:
        return session.scalar(select(Job.status).where(Job.id == job_id))


def serves(sdk: Any, model: str) -> bool:
    """Whether ``model`` answers one token through the OpenAI SDK ``sdk``; False while no predict
    server is up (a 503), any other error raised: the probe the serving tests wait on."""
    import openai

    try:
        sdk.completions.create(model=model, prompt="1", max_tokens=1)
    except openai.InternalServerError as exc:
        assert exc.status_code == 503, exc
        return False
    return True


@contextmanager
def served_in_thread(app: Any) -> Iterator[str]:
    """``app`` on a real HTTP server (uvicorn in a thread of this process): its URL. For what the
    in-process test client cannot show: a client that goes away, connections held open."""
    port = free_port()
    served = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    wait_until(lambda: served.started, timeout=60, what="uvicorn")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        served.should_exit = True
        thread.join(timeout=30)
