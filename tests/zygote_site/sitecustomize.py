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
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any

SOCKET_ENV = "GRADACC_TEST_ZYGOTE"
FORK_SERVER_COMMAND = "from multiprocessing.forkserver import main"


def proxy(path: str, fds: list[int], command: str) -> None:
    """The stand-in for a fork server forked by the zygote at ``path``: its exit status is the
    server's (1 if the zygote goes away first)."""
    import json
    import signal
    import socket

    conn = socket.socket(socket.AF_UNIX)
    conn.connect(path)
    payload = json.dumps(
        {"command": command, "fds": fds, "env": dict(os.environ), "cwd": os.getcwd()}
    ).encode()
    # Its standard streams too: the server writes to the worker's log, as one it started would.
    socket.send_fds(conn, [len(payload).to_bytes(8, "big")], [*fds, 0, 1, 2])
    conn.sendall(payload)
    for fd in fds:
        os.close(fd)
    answers = conn.makefile("rb")
    server = int(answers.readline())

    def forward(signum: int, _: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, forward)
    status = answers.readline().strip()
    os._exit(int(status) if status else 1)


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


_install()
