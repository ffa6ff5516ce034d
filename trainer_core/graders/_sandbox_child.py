"""The python grader's processes, run by ``trainer_core.graders.sandbox`` as a script inside new mount,
network and PID namespaces (and a user namespace when the server is not root). Standard library
only: nothing of the server is importable once the root has moved.

Two processes, so that the user's code never holds the answer channel:
- the *keeper* (this script, pid 1 of the namespace; trusted): joins the grading's cgroups (one
  budget for every process it will have), builds a root of read-only Python and a size-limited
  tmpfs, moves into it, forks the grader, reads the grader's result (at most ``RESULT_CAP``
  bytes, a score or a runtime error's detail and nothing else), and writes the one answer line;
- the *grader*: its standard streams on /dev/null, no other descriptor but its result pipe, the
  sandbox's own uid (when the keeper is root), a user namespace of its own (``RLIMIT_NPROC`` then
  counts this grading's processes only), its limits, no capability; then the user's code.

stdin: ``{"source", "sample", "item", "limits": {...}, "mounts": [...], "cgroups": [...],
"uid": n | null}``; stdout: one JSON line, ``{"score": x}``, ``{"error": kind, "detail": text}``
or ``{"signal": n}`` (the grader was killed by that signal)."""

from __future__ import annotations

import ctypes
import json
import math
import os
import platform
import resource
import select
import sys
import traceback
from typing import Any

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 1, 2, 4, 32  # mount(2)'s flags
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2
CLONE_NEWUSER = 0x10000000
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 38, 24
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
LIBC = ctypes.CDLL(None, use_errno=True)
RESULT_CAP = 8192  # a score, or a runtime error's detail (cut at 2,000 characters)
RUNTIME = "python_grader_runtime_error"


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
    os.chmod(root + "/scratch", 0o777)  # the grader may run as another uid than the keeper
    os.mkdir(root + "/.old")
    _check(
        LIBC.syscall(PIVOT_ROOT[platform.machine()], root.encode(), (root + "/.old").encode()),
        "pivot_root",
    )
    os.chdir("/")
    _check(LIBC.umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")


def join_cgroups(procs_files: list[str]) -> None:
    """Into each of the grading's cgroups, before anything else is forked: every process of the
    grading is then counted against one memory, process and CPU budget."""
    for path in procs_files:
        with open(path, "w") as procs:
            procs.write(str(os.getpid()))


def drop_privileges() -> None:
    """No capability left in the namespace, and none regained by exec."""
    _check(LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in range(64):
        LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    _check(LIBC.capset(header, data), "capset")


def become_grader(uid: int | None) -> None:
    """The keeper's rights shed: the sandbox's uid when the keeper is root (a process of root is
    never held to RLIMIT_NPROC), then a user namespace of its own, in which the process count of
    that uid is this grading's alone. Should the host refuse a user namespace, the count is the
    uid's over the host: still a bound, only a shared one."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    LIBC.unshare(CLONE_NEWUSER)


def set_limits(limits: dict[str, int]) -> None:
    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["disk_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["pids"],) * 2)


def grade(source: str, sample: object, item: object) -> float:
    scope: dict[str, Any] = {"__name__": "grader"}
    exec(compile(source, "grader.py", "exec"), scope)
    score = scope["grade"](sample, item)
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise TypeError(f"grade() returned {type(score).__name__}, not a number")
    if not math.isfinite(score):
        raise ValueError(f"grade() returned {score}")
    return float(score)


def run_grader(job: dict[str, Any], devnull: int, result: int) -> None:
    """The forked grader: never returns."""
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, result)
    os.closerange(result + 1, 1 << 16)
    os.chdir("/scratch")
    try:
        become_grader(job["uid"])
        set_limits(job["limits"])
        drop_privileges()
        answer: dict[str, Any] = {"score": grade(job["source"], job["sample"], job["item"])}
    except BaseException as exc:
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        answer = {"error": RUNTIME, "detail": last[:2000]}
    os.write(result, (json.dumps(answer) + "\n").encode())
    os._exit(0)


def collect(pid: int, result: int) -> tuple[bytes, int]:
    """What the grader wrote (at most RESULT_CAP bytes kept) and its wait status. Read until the
    grader itself ends: a process it forked may hold the pipe open and keep writing."""
    kept = bytearray()
    os.set_blocking(result, False)
    poller = select.poll()
    poller.register(result, select.POLLIN)
    while True:
        poller.poll(100)
        kept += _drain(result)[: max(0, RESULT_CAP - len(kept))]
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return bytes(kept + _drain(result))[:RESULT_CAP], status


def _drain(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def answer(written: bytes, status: int) -> dict[str, Any]:
    """The one answer: a signal is the keeper's to report, a score or a runtime error is read
    from the grader's last line, and anything else it wrote is a runtime error of its own."""
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    lines = written.decode(errors="replace").strip().splitlines()
    if not lines:
        return {
            "error": RUNTIME,
            "detail": f"the grader exited ({os.WEXITSTATUS(status)}) without a score",
        }
    try:
        said = json.loads(lines[-1])
    except ValueError:
        said = None
    if isinstance(said, dict) and set(said) == {"score"} and _finite(said["score"]):
        return {"score": float(said["score"])}
    if isinstance(said, dict) and said.get("error") == RUNTIME and set(said) == {"error", "detail"}:
        return {"error": RUNTIME, "detail": str(said["detail"])[:2000]}
    return {"error": RUNTIME, "detail": "the grader's result could not be read"}


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def main() -> None:
    job = json.loads(sys.stdin.read())
    try:
        join_cgroups(job["cgroups"])
        devnull = os.open("/dev/null", os.O_RDWR)
        build_root(job["mounts"], job["limits"]["disk_bytes"])
        read_end, write_end = os.pipe()
        pid = os.fork()
    except Exception as exc:
        said = {"error": "python_grader_server_error", "detail": str(exc)}
        sys.stdout.write(json.dumps(said) + "\n")
        return
    if pid == 0:
        os.close(read_end)
        run_grader(job, devnull, write_end)
    os.close(write_end)
    written, status = collect(pid, read_end)
    sys.stdout.write(json.dumps(answer(written, status)) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
