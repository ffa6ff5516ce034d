"""Test-only, and only where ``GRADACC_TEST_ZYGOTE`` names a socket: a worker's fork server is
forked from the e2e run's zygote (``tests/e2e/zygote.py``, torch and the core already imported)
instead of started as a fresh interpreter that imports them again (~4 s of CPU quiet, ~7.6 s in
the suite, once per worker the tests start).

Python imports this module at start-up in every process that has this folder on ``PYTHONPATH``
(the e2e tests put it there for their workers and servers). It wraps the one call that starts a
fork server (``multiprocessing.util.spawnv_passfds`` with the fork server's command): instead, a
small proxy process is started with the same file descriptors. The proxy hands them, its
environment and its working directory to the zygote, which forks the fork server; the proxy then
stands in for it (the worker's ``waitpid`` sees it), forwards signals to it and exits with its
status. Everything the fork server does after its start is unchanged: it imports the preload
module (``worker.fork_server.preload``, whose body runs in it) and forks the jobs.

Two more commands import torch cold in an e2e run: a worker's predict server (``python -m
worker.predict``, one per embedded worker, ~4.7 s of CPU each) and the API's adapter merge
(``python -m trainer_core merge``). ``subprocess.Popen`` is wrapped for exactly those
(``MODULES``): a proxy (``module_proxy``) stands in for the command as above, with ``-m MODULE
ARGS`` at the end of its command line (what a test that looks for the process sees). The zygote
forks a child that runs the module as ``__main__``, with the proxy's standard streams,
environment and directory, and that is killed when its proxy is gone (the proxy is the one
``Popen``'s ``preexec_fn`` reaches, ``die_with_parent`` included). The proxy ends as the module
did: its exit status, or killed by the same signal.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any

SOCKET_ENV = "GRADACC_TEST_ZYGOTE"
FORK_SERVER_COMMAND = "from multiprocessing.forkserver import main"
MODULES = ("worker.predict", "trainer_core")  # ``python -m`` commands that import torch cold


def _stand_in(path: str, request: dict[str, Any], fds: list[int], sent: list[int]) -> int:
    """Send ``request`` (with this process's environment and working directory) and ``fds`` to
    the zygote at ``path``, close ``sent``, then stand in for the child it forks, forwarding
    signals to it: its exit status (1 if the zygote goes away first)."""
    import json
    import signal
    import socket

    conn = socket.socket(socket.AF_UNIX)
    conn.connect(path)
    payload = json.dumps({**request, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(conn, [len(payload).to_bytes(8, "big")], fds)
    conn.sendall(payload)
    for fd in sent:
        os.close(fd)
    answers = conn.makefile("rb")
    child = int(answers.readline())

    def forward(signum: int, _: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, forward)
    status = answers.readline().strip()
    return int(status) if status else 1


def proxy(path: str, fds: list[int], command: str) -> None:
    """The stand-in for a fork server forked by the zygote at ``path``: its exit status is the
    server's."""
    # Its standard streams too: the server writes to the worker's log, as one it started would.
    request = {"command": command, "fds": fds}
    os._exit(_stand_in(path, request, [*fds, 0, 1, 2], sent=fds))


def module_proxy(path: str) -> None:
    """The stand-in for ``python -m MODULE ARGS`` (this process's arguments: ``-m MODULE ARGS``),
    run by a child of the zygote at ``path``."""
    import signal
    import sys

    module, *args = sys.argv[2:]
    code = _stand_in(path, {"module": module, "args": args}, [0, 1, 2], sent=[])
    if code < 0:  # killed by a signal: so is its stand-in
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _through_zygote(args: Any, socket_path: str) -> Any:
    """``args`` of a ``Popen``, rewritten to start a proxy where they run one of ``MODULES``."""
    import sys

    if not isinstance(args, list) or len(args) < 3 or not os.path.exists(socket_path):
        return args
    if args[0] != sys.executable or args[1] != "-m" or args[2] not in MODULES:
        return args
    call = f"import sitecustomize; sitecustomize.module_proxy({socket_path!r})"
    return [args[0], "-c", call, *args[1:]]


def _install() -> None:
    if not os.environ.get(SOCKET_ENV):
        return
    from multiprocessing import util

    original: Callable[..., int] = util.spawnv_passfds

    def spawnv_passfds(path: str, args: Sequence[str], passfds: Sequence[int]) -> int:
        socket_path = os.environ.get(SOCKET_ENV, "")
        if args and FORK_SERVER_COMMAND in args[-1] and os.path.exists(socket_path):
            call = f"import sitecustomize; sitecustomize.proxy({socket_path!r}, {list(passfds)!r}, {args[-1]!r})"
            return original(path, [path, "-c", call], passfds)
        return original(path, args, passfds)

    util.spawnv_passfds = spawnv_passfds  # type: ignore[assignment]

    import subprocess

    popen_init = subprocess.Popen.__init__

    def init(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        popen_init(self, _through_zygote(args, os.environ.get(SOCKET_ENV, "")), *rest, **options)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]


_install()
