"""Ranks forked from torchrun's agent instead of started cold.

torchrun starts each rank as ``python -u -m worker.child.ranks.main JOB_ID``: a new interpreter
that imports torch, transformers and the core again (~5 s of CPU a rank, at every start and
restart). Here the agent (``worker.child.ranks.agent``) imports them once (``preload``) and
torchrun forks each rank from it. Only the start changes (a fork where ``Popen`` would exec):
torchrun's own ``SubprocessContext`` still watches the ranks, each in its own session, records
every rank's exit status or signal, and stops the others with SIGTERM, then SIGKILL. So a killed
rank, a rank out of memory (its exit status) and a lost node fail exactly as before.

What a new interpreter would have had, a forked rank sets up itself: the rank's environment,
default signal handlers (the agent's would turn torchrun's SIGTERM into an exception), the
thread count ``OMP_NUM_THREADS`` asks for (read by OpenMP when the agent loaded torch, before
torchrun set it), line-buffered output (``-u``), and its own command line in ``/proc``
(``proc_title``). It leaves as ``multiprocessing``'s forked processes do (``fork_popen``): its
non-daemon threads joined (a checkpoint being written), output flushed, then ``os._exit`` (the
agent's exit handlers are not the rank's). The agent never runs a torch operation (no OpenMP pool exists to be broken by
the fork), and falls back to exec once CUDA was used in it (a CUDA context does not survive a
fork) or for any command other than a rank's.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import IO, Any

import torch
from torch.distributed.elastic.multiprocessing import api as elastic_api
from torch.distributed.elastic.multiprocessing.subprocess_handler import SubprocessHandler

from worker.child.ranks.fork_popen import ForkedPopen, default_signals
from worker.child.ranks.proc_title import ENV_ROOM, show_as

RANK_MODULE = "worker.child.ranks.main"
# What every rank imports before it trains: the rank's code (database, reporting), the core's
# loop with torch and transformers' model code, the plain backend, the data library. A rank still
# imports what only its job needs (another backend, LoRA) itself.
PRELOAD = (
    RANK_MODULE,
    "trainer_core.train",
    "trainer_core.backends.pytorch",
    "transformers.models.bert.modeling_bert",
    "transformers.models.gpt2.modeling_gpt2",
    "datasets",
)


def fork_ranks() -> None:
    """In the agent, before torchrun starts: import what a rank imports, and have torchrun fork
    its ranks from this process."""
    os.environ.pop(ENV_ROOM, None)  # proc_title's room: for /proc only, never a setting
    for name in PRELOAD:
        importlib.import_module(name)
    # torchrun's SubprocessContext builds each rank's handler through this module-level name.
    setattr(elastic_api, "get_subprocess_handler", _handler)  # noqa: B010


def _handler(
    entrypoint: str,
    args: tuple[Any, ...],
    env: dict[str, str],
    stdout: str | None,
    stderr: str | None,
    local_rank_id: int,
    numa_options: Any = None,
) -> SubprocessHandler:
    forkable = _rank_args((entrypoint, *map(str, args))) is not None
    if not forkable or numa_options is not None or _cuda_touched():
        return SubprocessHandler(entrypoint, args, env, stdout, stderr, local_rank_id, numa_options)
    return _ForkedHandler(entrypoint, args, env, stdout, stderr, local_rank_id, None)


def _cuda_touched() -> bool:
    """CUDA was used in this process (torch's lazy init, or any call that loaded the driver,
    such as a ``torch.cuda.is_available()`` at import): a forked child could not use it."""
    initialised = bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]
    return initialised or "libcuda.so" in Path("/proc/self/maps").read_text()


def _rank_args(command: Sequence[str]) -> list[str] | None:
    """The rank's arguments, if ``command`` is torchrun's for ``RANK_MODULE``."""
    if list(command[:4]) != [sys.executable, "-u", "-m", RANK_MODULE]:
        return None
    return list(command[4:])


class _ForkedHandler(SubprocessHandler):
    def _popen(self, args: tuple[str, ...], env: dict[str, str]) -> subprocess.Popen[bytes]:
        command = list(args)
        body = partial(_rank_main, command, env, self._stdout, self._stderr)
        return ForkedPopen(command, body, new_session=True)  # torchrun stops a rank with killpg


def _rank_main(
    command: list[str], env: dict[str, str], stdout: IO[Any] | None, stderr: IO[Any] | None
) -> int:
    for stream, fd in ((stdout, 1), (stderr, 2)):
        if stream is not None:
            os.dup2(stream.fileno(), fd)
    default_signals()
    rank_variables = {k: v for k, v in env.items() if os.environ.get(k) != v}
    os.environ.update(env)
    show_as(command, rank_variables)
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    for out in (sys.stdout, sys.stderr):
        if hasattr(out, "reconfigure"):
            out.reconfigure(line_buffering=True)
    main = importlib.import_module(RANK_MODULE)
    arguments = _rank_args(command) or []
    sys.argv = [main.__file__ or RANK_MODULE, *arguments]
    return int(main.main(arguments))
