"""A warm training process kept ready, so a job does not wait ~4 s for torch to import.

Each job still trains in a fresh process of its own (CUDA cannot survive a fork; a long-lived
trainer leaks memory). What is pooled is the *import*: the worker keeps one standby process,
``python -m worker.runner --standby``, that imports torch, transformers and the core at low CPU
priority, then blocks on its stdin. A job hands it the job id and the log path; the worker then
starts the next standby at once. The standby never touches CUDA before it gets a job.

If the worker dies, the standby reads end-of-file on its stdin and exits by itself.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from gradacc.settings import Settings, get_settings

STANDBY_FLAG = "--standby"


class StandbyPool:
    """At most one standby process per worker; ``take`` hands it a job and starts the next."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._standby: subprocess.Popen[bytes] | None = None

    def _spawn(self, settings: Settings) -> subprocess.Popen[bytes]:
        settings.jobs_dir.mkdir(parents=True, exist_ok=True)
        with (settings.jobs_dir / "standby.log").open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "worker.runner", STANDBY_FLAG],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a cancel kills the whole job
            )

    def warm(self, settings: Settings) -> None:
        if not settings.warm_standby:
            return
        with self._lock:
            if self._standby is None or self._standby.poll() is not None:
                self._standby = self._spawn(settings)

    def take(self, settings: Settings, *, job_id: str, log_path: Path) -> subprocess.Popen[bytes]:
        """A process now training ``job_id`` (the standby if it is alive, else a fresh one)."""
        with self._lock:
            process, self._standby = self._standby, None
        for _ in range(2):
            if process is None or process.poll() is not None:
                process = self._spawn(settings)
            try:
                assert process.stdin is not None
                process.stdin.write(f"{job_id}\t{log_path}\n".encode())
                process.stdin.close()
                break
            except (BrokenPipeError, OSError):
                process = None  # it died between the check and the write: start a fresh one
        self.warm(settings)
        assert process is not None
        return process

    def close(self) -> None:
        with self._lock:
            process, self._standby = self._standby, None
        if process is not None and process.stdin is not None:
            process.stdin.close()  # end-of-file: the standby exits by itself
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


POOL = StandbyPool()


def _warm_at_start(sender: Any = None, **_: Any) -> None:
    POOL.warm(get_settings())


def _close_at_exit(sender: Any = None, **_: Any) -> None:
    POOL.close()


worker_ready.connect(_warm_at_start, weak=False)
worker_shutdown.connect(_close_at_exit, weak=False)
