"""``python -m trainer_core ARGS`` as a process forked from the test process, for the core's kill
tests: a cold start imports torch, transformers and the core again (~5 s of CPU, more in the
suite) before the run the test kills even begins.

The child is a real process of its own (its pid is the one ``Hold`` records, SIGKILL ends it,
``wait`` returns ``-SIGKILL``), built as torchrun's forked ranks are (``ForkedPopen``, as
``forked_torchrun``): the handlers a new interpreter starts with, the given environment (the
hold's failpoint among it), one compute thread, its standard streams on ``/dev/null``. It runs
the CLI's ``main`` with ``ARGS`` and exits with its status, as ``python -m trainer_core`` does
(``forked``: any function in its place, for a run a test patches).
``tests/trainer_core/test_cli.py`` keeps ``python -m trainer_core`` as a fresh interpreter.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import partial

import torch

import trainer_core.__main__ as cli
from worker.child.ranks.fork_popen import ForkedPopen, default_signals


def forked_cli(args: list[str], env: dict[str, str]) -> ForkedPopen:
    """``python -m trainer_core *args`` with ``env`` (the whole environment), forked."""
    return forked([sys.executable, "-m", "trainer_core", *args], partial(cli.main, args), env)


def forked(command: list[str], body: Callable[[], int], env: dict[str, str]) -> ForkedPopen:
    """A process that stands for ``command`` and runs ``body`` (its exit status), forked."""
    return ForkedPopen(command, partial(_main, body, env), new_session=False)


def _main(body: Callable[[], int], env: dict[str, str]) -> int:
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    # Not pytest's capture objects: this process's own streams, as a new interpreter has them.
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    default_signals()
    os.environ.clear()
    os.environ.update(env)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    return body()
