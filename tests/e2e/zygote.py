"""The e2e run's zygote: one process per test process that imports what a worker's fork server
preloads, once, and forks each worker's fork server from itself
(``tests/zygote_site/sitecustomize.py`` says how a worker asks for one).

It also forks what ``MODULES`` of the site module name (a worker's predict server, the API's
merge): a child that runs the module as ``__main__`` and dies with its proxy.

``python -m tests.e2e.zygote SOCKET``. Single-threaded: it polls its socket and reaps the fork
servers it started, telling each one's proxy its pid, then its exit status. A forked server takes
the environment and working directory of the worker that asked, and runs the fork server's own
command (so ``worker.fork_server.preload`` is imported, and its body runs, in each server). The
zygote is started with the rank launcher's room at the end of its environment block
(``worker.child.ranks.proc_title``): a forked process keeps its parent's block in ``/proc``.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import traceback
from typing import Any, NoReturn

# What the preload imports, without the preload itself (its body runs in each fork server).
import worker.fork_server.child
import worker.fork_server.modes
import worker.fork_server.warmup  # noqa: F401
from worker.child.ranks.proc_title import ENV_ROOM


def serve(path: str) -> None:
    os.environ.pop(ENV_ROOM, None)
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
    proxies: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        ready, _, _ = select.select([listener], [], [], 0.5)
        if ready:
            conn, _ = listener.accept()
            pid = _fork_server(conn, listener)
            conn.sendall(f"{pid}\n".encode())
            print(f"forked {pid}", flush=True)
            proxies[pid] = conn
        _reap(proxies)


def _fork_server(conn: socket.socket, listener: socket.socket) -> int:
    header, fds, _, _ = socket.recv_fds(conn, 8, 5)
    size = int.from_bytes(header, "big")
    data = b""
    while len(data) < size:
        data += conn.recv(size - len(data))
    request = json.loads(data)
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    if "module" in request:
        _run_module(request, fds, conn, listener)
    code = 1
    try:
        conn.close()
        _take_over(request, fds[2:], listener)
        old, command = request["fds"], request["command"]
        command = command.replace(f"main({old[0]}, {old[1]},", f"main({fds[0]}, {fds[1]},", 1)
        exec(command, {"__name__": "__main__"})  # the fork server's loop
        code = 0
    except SystemExit as stop:  # how it ends when its worker is gone
        code = stop.code if isinstance(stop.code, int) else 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _take_over(request: dict[str, Any], streams: list[int], listener: socket.socket) -> None:
    """In a forked child: the asker's standard streams, environment and working directory."""
    listener.close()
    for stream, fd in enumerate(streams):
        os.dup2(fd, stream)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])


def _run_module(request: dict[str, Any], fds: list[int], conn: socket.socket,
                listener: socket.socket) -> NoReturn:  # fmt: skip
    """In a child: ``python -m MODULE ARGS`` as its proxy asked, killed when the proxy is gone."""
    code = 1
    try:
        _take_over(request, fds, listener)
        threading.Thread(target=_die_with, args=(conn,), daemon=True).start()
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for output in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                output.flush()
        os._exit(code)


def _die_with(conn: socket.socket) -> None:
    """The proxy sends nothing after its request: its end closes when it exits, however."""
    with contextlib.suppress(OSError):
        while conn.recv(64):
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def _reap(proxies: dict[int, socket.socket]) -> None:
    while proxies:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        conn = proxies.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
