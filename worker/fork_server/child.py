"""The first code a process forked for a job runs: it makes the fork server's child a job's
training process (its own session, the job's log, the server's mode undone), then trains."""

from __future__ import annotations

import os
import sys
from multiprocessing import forkserver

from worker.child.entry import main
from worker.child.stop import WORKER_PID_ENV
from worker.fork_server.modes import leave_server_mode


def run_forked(job_id: str, log_path: str, worker_pid: int) -> None:
    os.environ[WORKER_PID_ENV] = str(worker_pid)  # watched by the child's DatabaseStopCheck
    os.setsid()  # a cancel kills the whole group (data-loader processes included)
    _let_server_die_with_worker()
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), sys.stdout.fileno())
        os.dup2(log.fileno(), sys.stderr.fileno())
    leave_server_mode()
    sys.exit(main([job_id]))


def ready_probe() -> None:
    """Forked only to learn that the fork server is ready (its preload is done)."""


def _let_server_die_with_worker() -> None:
    """The server exits when the last holder of its "alive" pipe does. Every child inherits one
    end; the job's child drops it, so a worker's death ends its server and re-parents the job,
    which ``DatabaseStopCheck`` takes as a preemption (checkpoint, stop) instead of training on alone."""
    server = getattr(forkserver, "_forkserver")  # noqa: B009
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        os.close(alive_fd)
        server._forkserver_alive_fd = None
