"""The python grader's sandbox: the user's ``grade(sample, item)`` in a process of its own, in new
user, mount, network and PID namespaces (``unshare``), so it has no network, sees no file of the
server (a tmpfs root with the Python installation bound read-only), holds no capability, and
runs under CPU, memory, file-size and wall-clock limits. Where namespaces cannot be made, the
grader is not run (``python_grader_server_error``): it fails closed, never unconfined.
docs/reinforcement.md says what holds and what does not."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradacc.graders.errors import GraderFailed

CHILD = Path(__file__).with_name("_sandbox_child.py")
UNSHARE = ("--user", "--map-root-user", "--net", "--mount", "--pid", "--fork", "--kill-child")
MAX_ANSWER = 1 << 20


@dataclass(frozen=True)
class SandboxLimits:
    """OpenAI's grader gets 2 minutes, 2 GB of memory and 1 GB of disk; so does ours by default."""

    wall_s: float = 120.0
    cpu_s: int = 120
    memory_bytes: int = 2 << 30
    disk_bytes: int = 1 << 30


def readonly_mounts() -> list[str]:
    """What the grader sees, read-only: the system's libraries and this interpreter's standard
    library and installed packages (numpy and the like), each at its own path."""
    paths = ["/usr", "/bin", "/lib", "/lib64", "/sbin", os.path.realpath(sys.base_prefix)]
    paths.append(os.path.realpath(sysconfig.get_paths()["purelib"]))
    return [p for p in dict.fromkeys(paths) if os.path.lexists(p)]


def run_python(
    source: str, sample: dict[str, Any], item: Any, limits: SandboxLimits | None = None
) -> float:
    """The score ``grade(sample, item)`` returns, or GraderFailed of the kind OpenAI names."""
    limits = limits or SandboxLimits()
    unshare = shutil.which("unshare")
    if unshare is None:
        raise GraderFailed("python_grader_server_error", "sandbox_unavailable: no unshare")
    job = {"source": source, "sample": sample, "item": item, "mounts": readonly_mounts(),
           "limits": {"cpu_s": limits.cpu_s, "memory_bytes": limits.memory_bytes,
                      "disk_bytes": limits.disk_bytes}}  # fmt: skip
    command = [unshare, *UNSHARE, "--", sys.executable, "-I", str(CHILD)]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, cwd="/",
                          start_new_session=True) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(json.dumps(job).encode(), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # --kill-child takes the namespace down with it
            proc.communicate()
            raise GraderFailed(
                "unresponsive_reward_error", f"no score in {limits.wall_s} s"
            ) from None
    return _answer(out[:MAX_ANSWER], err, proc.returncode)


def _answer(out: bytes, err: bytes, returncode: int) -> float:
    lines = out.decode(errors="replace").strip().splitlines()
    if not lines:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        # Killed by a limit's signal (the hard CPU limit's SIGKILL): unshare 2.38 reports a
        # child's death by signal as "sigprocmask unblock failed" and exit 1, so both are read.
        if returncode < 0 or "sigprocmask" in tail[0]:
            raise GraderFailed("unresponsive_reward_error", "killed by a limit's signal")
        if tail[0].startswith("unshare:"):
            raise GraderFailed("python_grader_server_error", f"sandbox_unavailable: {tail[0]}")
        raise GraderFailed("python_grader_runtime_error",
                           f"the grader exited ({returncode}) without a score: {tail[0]}")  # fmt: skip
    answer = json.loads(lines[-1])
    if "error" in answer:
        raise GraderFailed(answer["error"], answer["detail"])
    score = float(answer["score"])
    if not math.isfinite(score):
        raise GraderFailed("python_grader_runtime_error", f"grade() returned {score}")
    return score
