"""Start a job's training process without paying the ~4 s import of torch and transformers.

Each job still trains in a fresh process of its own (a long-lived trainer leaks memory; CUDA
cannot survive a fork). What is shared is the *import*: each worker runs one fork server
(``multiprocessing``'s "forkserver"), which imports and warms up the core once, at low priority,
on the CPU only and single-threaded (``worker.fork_server.preload``), then forks a child per job
in ~10-30 ms. Nothing has touched CUDA or started a thread pool in the server before it forks.

If the worker dies, its fork server sees end-of-file and exits; a running child notices it was
re-parented (``DatabaseStopCheck``), checkpoints and stops, and the job is handed on.
``GRADACC_FORK_SERVER=false`` starts a cold ``python -m worker.child.entry JOB_ID`` per job instead.

The process comes back as the ``local`` executor's ``Execution`` (``LocalExecution``): a
preempt is SIGUSR1 to it, a stop SIGTERM then SIGKILL to its process group.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from multiprocessing import forkserver
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol

from gradacc.settings import Settings
from worker.child.ranks.proc_title import room_in_environment
from worker.fork_server.child import ready_probe, run_forked

PRELOAD = "worker.fork_server.preload"


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


class LocalExecution:
    """The ``local`` executor's ``Execution`` (``gradacc.executors.protocol``): one training
    process on this machine, in a session of its own (its ranks' torchrun, for several)."""

    def __init__(self, process: TrainingProcess, log_path: Path) -> None:
        self._process = process
        self._log_path = log_path

    @property
    def pid(self) -> int:
        return self._process.pid

    def wait(self, timeout: float | None = None) -> int:
        return self._process.wait(timeout)

    def preempt(self) -> None:
        self._process.send_signal(signal.SIGUSR1)  # the runner turns this into a "preempt" request

    def stop(self, grace_s: float) -> None:
        terminate_group(self._process, grace_s=grace_s)

    def logs(self) -> list[Path]:
        return [self._log_path]


def terminate_group(child: TrainingProcess, *, grace_s: float) -> None:
    """SIGTERM the child's process group, SIGKILL it after ``grace_s``, and reap the child."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            try:
                os.kill(child.pid, sig)  # just forked: not yet the leader of its own group
            except ProcessLookupError:
                break
        try:
            child.wait(timeout=grace_s)
            break
        except subprocess.TimeoutExpired:
            continue
    child.wait()


def warm(settings: Settings) -> None:
    """Start this worker's fork server (if it is not running) and wait until it has imported
    everything: called before the worker takes its first job, so that no job waits for it."""
    if not settings.fork_server:
        return
    probe = _context().Process(target=ready_probe, name="probe")
    with room_in_environment():  # in the server's /proc environment, for forked ranks
        probe.start()  # answered once the server's preload is done
    probe.join()


def _context() -> Any:
    """multiprocessing's fork-server context; its server (once per worker) preloads PRELOAD."""
    forkserver.set_forkserver_preload([PRELOAD])
    return multiprocessing.get_context("forkserver")


def start(settings: Settings, *, job_id: str, log_path: Path) -> LocalExecution:
    """A new process, in its own session, now training ``job_id``; its output goes to log_path."""
    if not settings.fork_server:
        with log_path.open("ab") as log:
            command = [sys.executable, "-m", "worker.child.entry", job_id]
            popen = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return LocalExecution(popen, log_path)
    process = _context().Process(
        target=run_forked, args=(job_id, str(log_path), os.getpid()), name=job_id
    )
    process.start()
    # Not joined at the worker's exit (multiprocessing would wait for a job that outlives it).
    getattr(multiprocessing.process, "_children").discard(process)  # noqa: B009
    return LocalExecution(ForkedProcess(process), log_path)
