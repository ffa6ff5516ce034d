"""``gradacc serve``: the API in this process plus N Celery worker processes beside it."""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from types import FrameType

import httpx

from gradacc.migrate import upgrade_database
from gradacc.scheduling.queue import worker_queues
from gradacc.settings import Settings

log = logging.getLogger(__name__)

# A worker's warm shutdown preempts its job (checkpoint at the next step) and releases it.
WORKER_STOP_GRACE_S = 20.0
SUPERVISE_EVERY_S = 1.0


def worker_argv(name: str, settings: Settings) -> list[str]:
    """Celery worker arguments: one job at a time (solo pool), on our queue. Quiet unless the
    log level is debug: no banner, Celery's own log at WARNING (ours stays at INFO)."""
    debug = settings.log_level == "debug"
    return [
        *([] if debug else ["--quiet"]),
        "worker",
        "--pool=solo",
        "--concurrency=1",
        f"--hostname={name}@%h",
        f"--queues={','.join(worker_queues(settings))}",  # the jobs that fit its devices
        "--without-mingle",  # the serverless brokers have no use for worker-to-worker chatter
        "--without-gossip",
        f"--loglevel={'DEBUG' if debug else 'WARNING'}",
    ]


def start_worker(settings: Settings, index: int, count: int) -> subprocess.Popen[bytes]:
    """Worker ``index`` of ``count``. Unless configured, each training process gets an equal share
    of the cores: N processes that each use every core spin against each other."""
    threads = settings.train_threads or max(1, (os.cpu_count() or 1) // max(count, 1))
    env = {
        **os.environ,
        "GRADACC_TRAIN_THREADS": str(threads),
        "GRADACC_LOG_LEVEL": settings.log_level,
    }
    argv = [sys.executable, "-m", "commands.cli", "worker", "--name", f"worker{index + 1}"]
    return subprocess.Popen(argv, env=env)


def start_workers(settings: Settings, count: int) -> list[subprocess.Popen[bytes]]:
    return [start_worker(settings, i, count) for i in range(count)]


def supervise_workers(
    settings: Settings, workers: list[subprocess.Popen[bytes]], stop: threading.Event
) -> None:
    """Restart a worker that died (as compose's ``restart: unless-stopped`` would): its job, if
    any, is handed on by the reconciler and resumed from its checkpoint."""
    while not stop.wait(SUPERVISE_EVERY_S):
        for index, worker in enumerate(workers):
            # Exit status 0 is a warm shutdown (Ctrl-C reaches the workers too): not a crash.
            if worker.poll() not in (None, 0) and not stop.is_set():
                log.warning("worker%d exited (%s); restarting it", index + 1, worker.returncode)
                workers[index] = start_worker(settings, index, len(workers))


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM (Celery's warm shutdown), then SIGKILL what is still alive after the grace.

    A killed worker's training process notices, saves a checkpoint and exits; the reconciler of
    the next start hands the job to a worker, which resumes it.
    """
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + WORKER_STOP_GRACE_S
    for worker in workers:
        try:
            worker.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


class Terminated(Exception):
    """SIGTERM, raised in the main thread so that the shutdown path of Ctrl-C runs."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


def announce_when_ready(url: str, stop: threading.Event) -> None:
    """One line once the API answers (uvicorn's own start-up lines are at INFO, kept quiet)."""
    while not stop.wait(0.2):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                log.info("API ready on %s (docs at %s/docs)", url, url)
                return
        except httpx.TransportError:
            continue


class InsecureBind(SystemExit):
    """Raised before anything starts: the exit status is its message."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def refuse_open_bind(settings: Settings, host: str) -> None:
    """Without API keys, an address other than loopback would hand every job, file and model to
    whoever reaches the port: refused unless ``GRADACC_ALLOW_INSECURE_BIND`` says so."""
    if settings.require_auth or settings.allow_insecure_bind or is_loopback(host):
        return
    raise InsecureBind(
        f"refusing to serve on {host} without API keys: set GRADACC_REQUIRE_AUTH=true (and "
        "create keys with `gradacc create-api-key`), bind 127.0.0.1, or set "
        "GRADACC_ALLOW_INSECURE_BIND=true to serve every tenant's data to anyone who can connect"
    )


def serve(settings: Settings, *, host: str, port: int, workers: int) -> int:
    """Until SIGINT or SIGTERM (Docker, systemd and ``kill`` send the latter): then the API
    stops, each worker preempts its job and exits, and nothing is left running."""
    import uvicorn

    refuse_open_bind(settings, host)
    if settings.is_embedded:
        upgrade_database(settings)
    # uvicorn handles SIGTERM itself, then re-raises it once it has stopped: with the default
    # handler that killed this process before the workers were stopped, leaving them orphaned.
    signal.signal(signal.SIGTERM, _raise_terminated)
    children = start_workers(settings, workers)
    log.info("%d worker(s) starting; each says when it is ready", workers)
    stopping = threading.Event()
    supervisor = threading.Thread(
        target=supervise_workers, args=(settings, children, stopping), daemon=True
    )
    supervisor.start()
    url = f"http://{host}:{port}"
    threading.Thread(target=announce_when_ready, args=(url, stopping), daemon=True).start()
    level = "debug" if settings.log_level == "debug" else "warning"
    try:
        uvicorn.run("api.main:app", host=host, port=port, log_level=level)
    except (KeyboardInterrupt, Terminated):
        pass
    finally:
        stopping.set()
        supervisor.join(timeout=5)
        stop_workers(children)
        log.info("stopped")
    return 0


def run_worker(settings: Settings, *, name: str) -> int:
    from worker.consumer.tasks import default_app

    if settings.log_level != "debug":
        # Celery's "superuser privileges" warning, once per worker: a container runs as root.
        warnings.filterwarnings("ignore", message=".*superuser privileges")

    default_app().worker_main(worker_argv(name, settings))
    return 0
