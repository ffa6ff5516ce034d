"""A real Celery worker process (``gradacc worker``) on PostgreSQL and Redis, and helpers to
submit tiny jobs and wait for them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import update

from api.main import create_app
from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job
from tests.conftest import ROOT, unique_queue
from tests.support import free_port, wait_ready, wait_until
from tests.zygote_site.sitecustomize import SOCKET_ENV
from worker.child.ranks.proc_title import env_room

# Short enough for a test to see the reconciler work; production keeps the defaults.
FAST_RECOVERY = {
    "GRADACC_HEARTBEAT_INTERVAL_S": "0.5",
    "GRADACC_STALE_AFTER_S": "3",
    "GRADACC_RECONCILE_INTERVAL_S": "1",
    "GRADACC_KILL_GRACE_S": "2",
    "GRADACC_TRAIN_THREADS": "1",  # leave a core to whatever else runs on a 2-core machine
    # An idle predict server polling SQLite every 20 ms (the default) took 7 % of a core, each
    # worker's; the predict tests wait for answers, they do not time them.
    "GRADACC_PREDICT_POLL_INTERVAL_S": "0.1",
}


# For a stack whose tests never predict: each worker's predict server imports torch and
# transformers beside its loop and polls the database (test_embedded.py alone, four workers:
# 42.7 -> 39.3 s of CPU without). The embedded stacks start one per worker unless told not to
# (the PostgreSQL stacks never do: settings_env).
NO_PREDICT = {"GRADACC_PREDICT_SERVER": "false"}

# Set while this test process's zygote runs (``zygote``): every worker's fork server is then
# forked from it rather than started as a fresh interpreter (tests/zygote_site/sitecustomize.py).
ZYGOTE: dict[str, str] = {}


@pytest.fixture(scope="session", autouse=True)
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One zygote per test process (``tests/e2e/zygote.py``): about 4 s of CPU once, instead of
    once per worker (the e2e tests start about sixty) and once per predict server or merge."""
    folder = tmp_path_factory.mktemp("zygote")
    path, log_path = folder / "socket", folder / "zygote.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **env_room()}  # room last
    with log_path.open("wb") as log:
        # A forked job's torchrun agent shows its command line in its parent's (the fork
        # server's, here the zygote's): too short, and the job starts its agent cold instead.
        argv = [sys.executable, "-m", "tests.e2e.zygote", str(path), "." * 4096]
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    def listening() -> bool:
        assert process.poll() is None, log_path.read_text()
        return path.exists()

    wait_until(listening, timeout=180, what="the zygote's socket")
    site = ROOT / "tests" / "zygote_site"
    ZYGOTE.update({SOCKET_ENV: str(path), "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])})
    yield
    ZYGOTE.clear()
    process.terminate()
    process.wait(timeout=30)


def without_zygote(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a process whose fork server must start as in production (a file that proves
    the real process tree)."""
    return {name: value for name, value in env.items() if name not in ZYGOTE}


def settings_env(settings: Settings) -> dict[str, str]:
    env = {**os.environ, **FAST_RECOVERY, **ZYGOTE, "HF_HUB_OFFLINE": "1",
           "GRADACC_HOME": str(settings.home)}  # fmt: skip
    env["GRADACC_QUEUE"] = settings.queue
    if settings.database_url:
        env["GRADACC_DATABASE_URL"] = settings.database_url
        # Every test's PostgreSQL stack shares the one database `test`, each with its own home:
        # a worker's predict server would take another test's predictions (and find no model).
        env["GRADACC_PREDICT_SERVER"] = "false"
    if settings.broker_url:
        env["GRADACC_BROKER_URL"] = settings.broker_url
    return env


class WorkerProcess:
    """``gradacc worker`` as a child process with its output in a log file."""

    def __init__(self, settings: Settings, name: str, env: dict[str, str] | None = None) -> None:
        self.log_path = settings.home / f"{name}.log"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "commands.cli", "worker", "--name", name],
                cwd=ROOT,
                env=settings_env(settings) | (env or {}),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        """A crash: SIGKILL, no warm shutdown, nothing acknowledged."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture(scope="module")
def pg_redis_settings(
    pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    home = tmp_path_factory.mktemp("home")
    queue = unique_queue()
    settings = Settings(home=home, database_url=pg_url, broker_url=redis_url, queue=queue)
    settle_unfinished_jobs(settings)
    yield settings
    forget_queue(redis_url, queue)


def settle_unfinished_jobs(settings: Settings) -> None:
    """Jobs other modules left queued or running in the shared test database would be found by
    this module's reconcilers (after requeue_after_s) and trained, taking a worker a test waits
    for. They belong to no worker here: mark them cancelled."""
    with session_scope(settings) as session:
        session.execute(
            update(Job).where(Job.status.in_(["queued", "running"])).values(status="cancelled")
        )
        session.commit()


def forget_queue(redis_url: str, queue: str) -> None:
    """Drop this run's queue, its bindings and any message a killed worker left unacked."""
    client = redis.Redis.from_url(redis_url)
    client.delete(queue, *client.keys(f"*{queue}*"))  # the queue name keeps this non-empty
    for tag, payload in client.hgetall("unacked").items():
        if queue.encode() in payload:
            client.hdel("unacked", tag)
            client.zrem("unacked_index", tag)


@pytest.fixture(scope="module")
def api(pg_redis_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(pg_redis_settings)) as client:
        yield client


StartWorker = Callable[..., "WorkerProcess"]  # (name, env=None): a worker on PostgreSQL + Redis


@pytest.fixture
def start_worker(pg_redis_settings: Settings) -> Iterator[StartWorker]:
    started: list[WorkerProcess] = []

    def start(name: str, env: dict[str, str] | None = None) -> WorkerProcess:
        started.append(WorkerProcess(pg_redis_settings, name, env))
        return started[-1]

    yield start
    for worker in started:
        worker.stop()


def process_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def path_of(settings: Settings, job_id: str) -> Path:
    return settings.jobs_dir / job_id


def embedded_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``gradacc serve`` on the embedded defaults under ``home``."""
    env = settings_env(Settings(home=home)) | (extra or {})
    for name in ("GRADACC_DATABASE_URL", "GRADACC_BROKER_URL", "GRADACC_QUEUE"):
        env.pop(name, None)
    return env


@contextmanager
def embedded_serve(
    folder: Path, *, env: dict[str, str] | None = None, workers: int = 1
) -> Iterator[tuple[str, Path]]:
    """``gradacc serve`` on the embedded defaults under ``folder/home``, ready (a worker alive):
    (its base URL, its log file). Stopped as a person would (SIGTERM) on the way out."""
    port, log_path = free_port(), folder / "serve.log"
    argv = [sys.executable, "-m", "commands.cli", "serve", "--port", str(port),
            "--workers", str(workers)]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, cwd=ROOT, env=embedded_env(folder / "home", env),
                                   stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url) as client:
            wait_ready(client, timeout_s=180)
        yield url, log_path
    finally:
        process.terminate()
        try:
            process.wait(90)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def served_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``gradacc serve --workers 1`` on the embedded defaults, over real HTTP: its base URL. No
    predict server: the dashboard's test, its one user, never predicts."""
    with embedded_serve(tmp_path_factory.mktemp("served"), env=NO_PREDICT) as (url, _):
        yield url


@contextmanager
def serve_with_keys(
    request: pytest.FixtureRequest, home: Path, env: dict[str, str], *, workers: int = 1
) -> Iterator[tuple[Settings, str, dict[str, str]]]:
    """``gradacc serve --workers N`` (1 unless told) with API keys on, under ``home``, on the stack the fixture's
    param names ("embedded", or "pg_redis": PostgreSQL and Redis), with ``env`` added: (its
    settings, its base URL, a key for tenants alice and bob). Stopped as a person would
    (SIGTERM); the tail of its log is printed."""

    settings = Settings(home=home, queue=unique_queue())
    if request.param == "pg_redis":
        pg_url, redis_url = request.getfixturevalue("pg_url"), request.getfixturevalue("redis_url")
        settings = settings.model_copy(update={"database_url": pg_url, "broker_url": redis_url})
        settle_unfinished_jobs(settings)
    full_env = settings_env(settings)
    if settings.is_embedded:
        for name in ("GRADACC_DATABASE_URL", "GRADACC_BROKER_URL"):
            full_env.pop(name, None)
    full_env |= {"GRADACC_REQUIRE_AUTH": "true", **env}
    port, log_path = free_port(), home / "serve.log"
    argv = [sys.executable, "-m", "commands.cli", "serve", "--port", str(port),
            "--workers", str(workers)]  # fmt: skip
    with log_path.open("wb") as log:
        server = subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=log,
                                  stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=30) as anonymous:
            wait_ready(anonymous)
        with session_scope(settings) as session:
            keys = {t: create_api_key(session, tenant=t) for t in ("alice", "bob")}
        yield settings, url, keys
    finally:
        server.terminate()
        server.wait(timeout=60)
        print(log_path.read_text(errors="replace")[-3000:])
