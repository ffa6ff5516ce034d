"""Imported once, by each worker's fork server (``worker.launcher``): every job forked from it
starts with torch, transformers and the core already imported and warmed up.

The warm-up runs single-threaded, so no OpenMP thread pool exists when the server forks (a
pool does not survive a fork). It never touches CUDA. It runs at nice 10 where its children can
return to 0 (as root); elsewhere (the compose image runs as a plain user) at normal priority, as
it only imports at worker start. ``enter_job`` undoes both in a forked child.
"""

from __future__ import annotations

import os

import torch

import worker.launcher  # what a forked child unpickles: already imported
import worker.runner  # noqa: F401
from trainer_core.warmup import warm_up

NICENESS = 10
DEFAULT_THREADS = torch.get_num_threads()
NICED = os.geteuid() == 0  # only root may return its children to normal priority


def enter_job() -> None:
    """In a child forked for a job: torch's default threads and normal priority again."""
    torch.set_num_threads(DEFAULT_THREADS)
    if NICED:
        os.setpriority(os.PRIO_PROCESS, 0, 0)


def _prepare() -> None:
    if NICED:
        os.setpriority(os.PRIO_PROCESS, 0, NICENESS)
    torch.set_num_threads(1)
    warm_up()


_prepare()
