"""Start a job's training process without paying the ~4 s import of torch and transformers.

Each job still trains in a fresh process of its own (a long-lived trainer leaks memory; CUDA
cannot survive a fork). What is shared is the *import*: each worker runs one fork server
(``multiprocessing``'s "forkserver"), which imports and warms up the core once, at low priority,
on the CPU only and single-threaded (``worker.zygote``), then forks a child per job in ~10-30 ms.
Nothing has touched CUDA or started a thread pool in the server before it forks.

If the worker dies, its fork server sees end-of-file and exits; a running child notices it was
re-parented (``StopPoller``), checkpoints and stops, and the job is handed on.
``GRADACC_WARM_STANDBY=false`` starts a cold ``python -m worker.runner JOB_ID`` per job instead.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from multiprocessing import forkserver
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol

from celery.signals import worker_ready

from gradacc.settings import Settings, get_settings

ZYGOTE = "worker.zygote"


class TrainingProcess(Protocol):
    """What the supervisor needs of a training process (``subprocess.Popen`` has it)."""

    @property
    def pid(self) -> int: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...


class ForkedProcess:
    """A child of the fork server, behind the part of the ``Popen`` interface we use."""

    def __init__(self, process: BaseProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        assert self._process.pid is not None  # started
        return self._process.pid

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"training process {self.pid}", timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)


def warm(settings: Settings) -> None:
    """Start this worker's fork server (if it is not running) and wait until it has imported
    everything: called before the worker takes its first job, so that no job waits for it."""
    if not settings.warm_standby:
        return
    probe = _context().Process(target=_ready, name="probe")
    probe.start()  # answered once the server's preload is done
    probe.join()


def _context() -> Any:
    """multiprocessing's fork-server context; its server (once per worker) preloads ZYGOTE."""
    forkserver.set_forkserver_preload([ZYGOTE])
    return multiprocessing.get_context("forkserver")


def _ready() -> None:
    """Forked only to learn that the fork server is ready."""


def start(settings: Settings, *, job_id: str, log_path: Path) -> TrainingProcess:
    """A new process, in its own session, now training ``job_id``; its output goes to log_path."""
    if not settings.warm_standby:
        with log_path.open("ab") as log:
            command = [sys.executable, "-m", "worker.runner", job_id]
            return subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
    process = _context().Process(target=run_forked, args=(job_id, str(log_path)), name=job_id)
    process.start()
    # Not joined at the worker's exit (multiprocessing would wait for a job that outlives it).
    getattr(multiprocessing.process, "_children").discard(process)  # noqa: B009
    return ForkedProcess(process)


def run_forked(job_id: str, log_path: str) -> None:
    """In the forked child: a session of its own, the job's log, the server's settings undone
    (``zygote.enter_job``), then train."""
    os.setsid()  # a cancel kills the whole group (data-loader processes included)
    _let_server_die_with_worker()
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), sys.stdout.fileno())
        os.dup2(log.fileno(), sys.stderr.fileno())
    from worker import zygote
    from worker.runner import main

    zygote.enter_job()
    sys.exit(main([job_id]))


def _let_server_die_with_worker() -> None:
    """The server exits when the last holder of its "alive" pipe does. Every child inherits one
    end; the job's child drops it, so a worker's death ends its server and re-parents the job,
    which ``StopPoller`` takes as a preemption (checkpoint, stop) instead of training on alone."""
    server = getattr(forkserver, "_forkserver")  # noqa: B009
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        os.close(alive_fd)
        server._forkserver_alive_fd = None


def _warm_at_start(sender: Any = None, **_: Any) -> None:
    warm(get_settings())


worker_ready.connect(_warm_at_start, weak=False)
