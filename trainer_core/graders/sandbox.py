"""The python grader's sandbox: the user's ``grade(sample, item)`` in processes of its own, in new
mount, network and PID namespaces (``unshare``; a user namespace too when the server is not root),
so it has no network, sees no file of the server (a tmpfs root with the Python installation bound
read-only), holds no capability, and runs under CPU, memory, process, file-size and wall-clock
limits, with one memory and process budget for all its processes where a cgroup can be made
(``trainer_core.graders.budget``). Where namespaces cannot be made, the grader is not run
(``python_grader_server_error``): it fails closed, never unconfined.

Nothing it writes is read whole: its own output goes to /dev/null, and of its keeper's answer at
most ``MAX_ANSWER`` bytes are read before the sandbox is killed. docs/security.md says what
holds and what does not."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_core.graders.budget import Budget, find_hierarchy, grading_budget
from trainer_core.graders.errors import GraderFailed

CHILD = Path(__file__).with_name("_sandbox_child.py")
NAMESPACES = ("--net", "--mount", "--pid", "--fork", "--kill-child")
AS_USER = ("--user", "--map-root-user")  # not root: the namespaces need a user namespace
MAX_ANSWER = 64 << 10  # the keeper's one line (a detail is cut at 2,000 characters)
POLL_S = 0.1  # how often a waiting sandbox looks at its deadline and its cancel
# One thread for the numeric libraries a grader may import: threads count as processes.
ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
SIGNALS_OF_CPU = (signal.SIGXCPU, signal.SIGKILL)  # RLIMIT_CPU's soft and hard limits


@dataclass(frozen=True)
class SandboxLimits:
    """OpenAI's grader gets 2 minutes, 2 GB of memory and 1 GB of disk; so does ours by default.
    ``pids``: processes and threads at once; ``uid``: the grader's when the server is root;
    ``cgroup``: ``auto``, ``off`` or a delegated v2 directory (``trainer_core.graders.budget``)."""

    wall_s: float = 120.0
    cpu_s: int = 120
    memory_bytes: int = 2 << 30
    disk_bytes: int = 1 << 30
    pids: int = 8
    cpus: float = 1.0
    uid: int = 65534
    cgroup: str = "auto"


def readonly_mounts() -> list[str]:
    """What the grader sees, read-only: the system's libraries and this interpreter's standard
    library and installed packages (numpy and the like), each at its own path."""
    paths = ["/usr", "/bin", "/lib", "/lib64", "/sbin", os.path.realpath(sys.base_prefix)]
    paths.append(os.path.realpath(sysconfig.get_paths()["purelib"]))
    return [p for p in dict.fromkeys(paths) if os.path.lexists(p)]


def run_python(
    source: str,
    sample: dict[str, Any],
    item: Any,
    limits: SandboxLimits | None = None,
    *,
    deadline: float | None = None,
    cancel: threading.Event | None = None,
) -> float:
    """The score ``grade(sample, item)`` returns, or GraderFailed of the kind OpenAI names.
    ``deadline`` (``time.monotonic()``) may end it before ``limits.wall_s``; ``cancel`` ends it
    as soon as it is set (the asker went away)."""
    limits = limits or SandboxLimits()
    unshare = shutil.which("unshare")
    if unshare is None:
        raise GraderFailed("python_grader_server_error", "sandbox_unavailable: no unshare")
    try:
        hierarchy = find_hierarchy(limits.cgroup)
    except ValueError as exc:
        raise GraderFailed("python_grader_server_error", f"sandbox_unavailable: {exc}") from None
    root = os.geteuid() == 0
    command = [
        unshare,
        *(() if root else AS_USER),
        *NAMESPACES,
        "--",
        sys.executable,
        "-I",
        str(CHILD),
    ]
    ends = time.monotonic() + limits.wall_s
    ends = ends if deadline is None else min(ends, deadline)
    with grading_budget(
        hierarchy, memory_bytes=limits.memory_bytes, pids=limits.pids, cpus=limits.cpus
    ) as budget:
        job = {
            "source": source,
            "sample": sample,
            "item": item,
            "mounts": readonly_mounts(),
            "cgroups": budget.procs_files,
            "uid": limits.uid if root else None,
            "limits": {
                "cpu_s": limits.cpu_s,
                "memory_bytes": limits.memory_bytes,
                "disk_bytes": limits.disk_bytes,
                "pids": limits.pids,
            },
        }
        out, err, ended = _sandboxed(command, json.dumps(job).encode(), ends, cancel)
        return _answer(out, err, ended, budget, limits)


def _sandboxed(
    command: list[str], job: bytes, ends: float, cancel: threading.Event | None
) -> tuple[bytes, bytes, str]:
    """The keeper's answer and its stderr, each read to a cap, and how it ended: ``exited``,
    ``deadline``, ``cancelled`` or ``overflow`` (more than MAX_ANSWER: killed)."""
    with subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        cwd="/",
        start_new_session=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            proc.stdin.write(job)
            proc.stdin.close()
        except BrokenPipeError:  # unshare failed at once: its stderr says why
            pass
        kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
        ended = _read_until(proc, kept, ends, cancel)
        if ended != "exited":
            _kill(proc)  # --kill-child takes the namespace down with the process group
        proc.wait()
        return bytes(kept[proc.stdout]), bytes(kept[proc.stderr]), ended


def _read_until(
    proc: subprocess.Popen[bytes],
    kept: dict[Any, bytearray],
    ends: float,
    cancel: threading.Event | None,
) -> str:
    with selectors.DefaultSelector() as selector:
        for stream in kept:
            os.set_blocking(stream.fileno(), False)
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            if cancel is not None and cancel.is_set():
                return "cancelled"
            if time.monotonic() >= ends:
                return "deadline"
            for key, _ in selector.select(POLL_S):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                kept[key.fileobj] += chunk
                if len(kept[key.fileobj]) > MAX_ANSWER:
                    return "overflow"
    return "exited"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _answer(out: bytes, err: bytes, ended: str, budget: Budget, limits: SandboxLimits) -> float:
    if ended == "cancelled":
        raise GraderFailed("unresponsive_reward_error", "cancelled: the request went away")
    if ended == "deadline":
        raise GraderFailed("unresponsive_reward_error", "no score before the deadline")
    if ended == "overflow":
        raise GraderFailed("python_grader_server_error", "the sandbox wrote too much")
    lines = out.decode(errors="replace").strip().splitlines()
    if budget.out_of_memory():
        raise GraderFailed(
            "python_grader_runtime_error",
            "out of memory: the grader's "
            f"processes passed {limits.memory_bytes} bytes together "
            "(GRADACC_GRADER_MEMORY_BYTES)",
        )
    if not lines:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no answer"]
        raise GraderFailed("python_grader_server_error", f"sandbox_unavailable: {tail[0]}")
    answer = json.loads(lines[-1])
    if "signal" in answer:
        if answer["signal"] in SIGNALS_OF_CPU:
            raise GraderFailed("unresponsive_reward_error", "the CPU time limit ran out")
        raise GraderFailed(
            "python_grader_runtime_error", f"the grader was killed by signal {answer['signal']}"
        )
    if "error" in answer:
        raise GraderFailed(answer["error"], answer["detail"])
    return float(answer["score"])
