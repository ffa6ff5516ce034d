"""torchrun for the core's tests, with its ranks forked from a warm agent instead of started cold:
``python -m tests.trainer_core.forked_torchrun <torchrun arguments>``.

A cold rank imports torch, transformers and the core again (~5 s of CPU, twice per two-rank
launch). The worker's agent forks its ranks (``worker.child.ranks.forked``), but only for the
worker's rank module; this agent does the same for any ``python -u -m MODULE`` or ``python -u
SCRIPT`` command, so that ``-m trainer_core run`` and ``dist_runner.py`` start forked too. It
uses the worker's pieces for the fork (``ForkedPopen``: torchrun still watches, signals and reaps
each rank, in its own session) and for what a new interpreter would have had (default signal
handlers, the rank's environment, the thread count, line-buffered output). The agent runs no
torch operation before it forks (no OpenMP pool to break). Used by ``test_distributed.py``'s
``torchrun``; ``tests/worker/test_forked_ranks.py`` tests the worker's own forked start.
"""

from __future__ import annotations

import importlib
import os
import runpy
import subprocess
import sys
from functools import partial
from typing import IO, Any

import torch
from torch.distributed.elastic.multiprocessing import api as elastic_api
from torch.distributed.elastic.multiprocessing.subprocess_handler import SubprocessHandler
from torch.distributed.run import main as torchrun_main

from worker.child.ranks.fork_popen import ForkedPopen, default_signals

# What the core's distributed tests' ranks import: the loop, the three backends, the models.
PRELOAD = (
    "trainer_core.train",
    "trainer_core.backends.pytorch",
    "trainer_core.backends.accelerate",
    "trainer_core.backends.trainer",
    "trainer_core.testing.comm_counter",
    "transformers.models.bert.modeling_bert",
    "transformers.models.gpt2.modeling_gpt2",
)


def _handler(
    entrypoint: str, args: tuple[Any, ...], env: dict[str, str], stdout: str | None,
    stderr: str | None, local_rank_id: int, numa_options: Any = None,
) -> SubprocessHandler:  # fmt: skip
    if entrypoint != sys.executable or numa_options is not None:
        return SubprocessHandler(entrypoint, args, env, stdout, stderr, local_rank_id, numa_options)
    return _ForkedHandler(entrypoint, args, env, stdout, stderr, local_rank_id, None)


class _ForkedHandler(SubprocessHandler):
    def _popen(self, args: tuple[str, ...], env: dict[str, str]) -> subprocess.Popen[bytes]:
        body = partial(_rank_main, list(args[1:]), env, self._stdout, self._stderr)
        return ForkedPopen(list(args), body, new_session=True)  # torchrun stops a rank with killpg


def _rank_main(
    args: list[str], env: dict[str, str], stdout: IO[Any] | None, stderr: IO[Any] | None
) -> int:
    """``args``: the interpreter's (``-u``, then ``-m MODULE`` or a script, then its own)."""
    for stream, fd in ((stdout, 1), (stderr, 2)):
        if stream is not None:
            os.dup2(stream.fileno(), fd)
    default_signals()
    os.environ.update(env)
    if "OMP_NUM_THREADS" in os.environ:  # read by OpenMP when the agent loaded torch, unset then
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    for out in (sys.stdout, sys.stderr):
        if hasattr(out, "reconfigure"):
            out.reconfigure(line_buffering=True)  # python -u
    args = args[1:] if args[:1] == ["-u"] else args
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")
    return 0  # a script that ends without sys.exit; sys.exit's status is ForkedPopen's to read


def main() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    # torchrun's SubprocessContext builds each rank's handler through this module-level name.
    setattr(elastic_api, "get_subprocess_handler", _handler)  # noqa: B010
    torchrun_main()


if __name__ == "__main__":
    main()
