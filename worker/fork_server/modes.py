"""The fork server's own settings, and their undoing in each process forked for a job.

The server imports and warms up single-threaded, so that no OpenMP thread pool exists when it
forks (a pool does not survive a fork), and at nice 10 where its children can return to 0 (only
root may raise a priority again; the compose image runs as a plain user, at normal priority, as
the server only imports at worker start). torch is imported inside the functions: the Celery
worker imports this module (through ``worker.fork_server.child``) and must not load torch.
"""

from __future__ import annotations

import os

NICENESS = 10
NICED = os.geteuid() == 0  # only root may return its children to normal priority
_default_threads: int | None = None


def enter_server_mode() -> None:
    """In the fork server, before it imports and warms up: one thread, low priority."""
    import torch

    global _default_threads
    _default_threads = torch.get_num_threads()
    if NICED:
        os.setpriority(os.PRIO_PROCESS, 0, NICENESS)
    torch.set_num_threads(1)


def leave_server_mode() -> None:
    """In a process forked for a job: torch's default threads and normal priority again."""
    import torch

    if _default_threads is not None:
        torch.set_num_threads(_default_threads)
    if NICED:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
