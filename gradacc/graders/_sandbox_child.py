"""The python grader's process, run by ``gradacc.graders.sandbox`` as a script inside new user,
mount, network and PID namespaces. It builds a root of read-only Python and a size-limited
tmpfs, moves into it, drops every capability, sets its limits, and only then runs the user's
code. Standard library only: nothing of the server is importable once the root has moved.

stdin: ``{"source", "sample", "item", "limits": {...}, "mounts": [...]}``; stdout: one JSON line,
``{"score": x}`` or ``{"error": kind, "detail": text}``."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import signal
import sys
import traceback
from typing import Any

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 32, 4096, 16384, 1 << 18,
)  # fmt: skip
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 38, 24
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
LIBC = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    _check(LIBC.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


STAGING = ("/mnt", "/media", "/srv", "/opt", "/var/tmp", "/tmp", "/run", "/home")


def staging_dir(mounts: list[str]) -> str:
    """An existing directory to build the new root on (a tmpfs over it, in this mount namespace
    only) that holds none of the paths to bind: a tmpfs over /tmp would hide a virtualenv there."""
    for candidate in STAGING:
        inside = any(os.path.commonpath([candidate, path]) == candidate for path in mounts)
        if os.path.isdir(candidate) and not os.path.islink(candidate) and not inside:
            return candidate
    raise OSError(f"no directory to build the sandbox on: each of {STAGING} holds Python")


def build_root(mounts: list[str], disk_bytes: int) -> None:
    """A fresh tmpfs as /, the given paths bound read-only at the same places, and the old root
    unmounted: nothing else of the host's files is reachable."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = staging_dir(mounts)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_bytes},mode=0755")
    for path in mounts:
        if os.path.islink(path):  # /lib -> usr/lib on merged-/usr systems
            os.symlink(os.readlink(path), root + path)
            continue
        os.makedirs(root + path, exist_ok=True)
        _mount(path, root + path, None, MS_BIND | MS_REC)
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
        _mount(None, root + path, None, flags)
    os.makedirs(root + "/scratch", mode=0o777)
    os.mkdir(root + "/.old")
    _check(LIBC.syscall(PIVOT_ROOT[platform.machine()], root.encode(), (root + "/.old").encode()),
           "pivot_root")  # fmt: skip
    os.chdir("/")
    _check(LIBC.umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")
    os.chdir("/scratch")


def drop_privileges() -> None:
    """No capability left in the namespace, and none regained by exec."""
    _check(LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in range(64):
        LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    _check(LIBC.capset(header, data), "capset")


def set_limits(limits: dict[str, int]) -> None:
    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["disk_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def grade(source: str, sample: object, item: object) -> float:
    scope: dict[str, Any] = {"__name__": "grader"}
    exec(compile(source, "grader.py", "exec"), scope)
    score = scope["grade"](sample, item)
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise TypeError(f"grade() returned {type(score).__name__}, not a number")
    return float(score)


def main() -> None:
    job = json.loads(sys.stdin.read())
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the user's prints go to stderr, never into the answer
    sys.stdout = sys.stderr
    try:
        build_root(job["mounts"], job["limits"]["disk_bytes"])
        drop_privileges()
        set_limits(job["limits"])
    except Exception as exc:
        out.write(json.dumps({"error": "python_grader_server_error", "detail": str(exc)}) + "\n")
        return

    def out_of_cpu(*_: object) -> None:
        out.write(json.dumps({"error": "unresponsive_reward_error",
                              "detail": "the CPU time limit ran out"}) + "\n")  # fmt: skip
        out.flush()
        os._exit(0)

    signal.signal(signal.SIGXCPU, out_of_cpu)
    try:
        answer: dict[str, Any] = {"score": grade(job["source"], job["sample"], job["item"])}
    except BaseException as exc:
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        answer = {"error": "python_grader_runtime_error", "detail": last[:2000]}
    out.write(json.dumps(answer) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
