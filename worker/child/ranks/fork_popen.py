"""A ``subprocess.Popen`` whose child is forked and runs a function in place of an exec: the
torchrun agent forked from a warm launcher, each rank forked from its agent (``forked``). The
parent keeps Popen's own ``poll``, ``wait`` and signals; the child undoes what a new interpreter
would not have had, and leaves as ``multiprocessing``'s forked processes do. Torch-free: the
launcher imports it."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from multiprocessing import util as mp_util
from typing import Any, NoReturn

_PR_SET_PDEATHSIG = 1
_DEFAULT_SIGNALS = (
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCHLD,
)


def die_with_parent() -> None:
    """Linux: SIGKILL this process when the process that started it exits, however it exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ForkedPopen(subprocess.Popen[bytes]):
    """``command`` is what the child stands for (``/proc`` is the body's to rewrite);
    ``new_session``: as ``Popen(start_new_session=True)``, done before the constructor returns."""

    def __init__(self, command: list[str], body: Callable[[], int], *, new_session: bool) -> None:
        self._body = body
        self._new_session = new_session
        super().__init__(command)

    def _execute_child(self, *_popen_arguments: Any) -> None:
        ready_read, ready_write = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # or the child would write the parent's buffered lines again
        pid = os.fork()
        if pid == 0:
            os.close(ready_read)
            _run(self._body, new_session=self._new_session, ready=ready_write)
        os.close(ready_write)
        os.read(ready_read, 1)  # the child has its session: the caller may killpg it now
        os.close(ready_read)
        self.pid = pid
        self._child_created = True


def default_signals() -> None:
    """The handlers a new interpreter starts with (the parent's might turn SIGTERM into an
    exception, or SIGUSR1 into a preemption request)."""
    for signum in _DEFAULT_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    mp_util._finalizer_registry.clear()  # type: ignore[attr-defined]  # the parent's, as mp's fork does


def _run(body: Callable[[], int], *, new_session: bool, ready: int) -> NoReturn:
    code = 1
    try:
        if new_session:
            os.setsid()
        os.close(ready)
        code = body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()  # as the interpreter would, then status 1
    finally:
        _leave(code)


def _leave(code: int) -> NoReturn:
    """As ``multiprocessing``'s forked processes end (``Process._bootstrap``)."""
    try:
        getattr(mp_util, "_exit_function")()  # noqa: B009  (its own children: data loaders)
        getattr(threading, "_shutdown")()  # noqa: B009  (non-daemon threads, as at exit)
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(code)
