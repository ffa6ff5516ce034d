"""One grading's budget over all its processes: a cgroup of its own per sandbox, where the host
lets this process make one (``GRADACC_GRADER_CGROUP``).

- cgroup v2: a directory the operator delegated (its ``cgroup.subtree_control`` enables
  ``memory`` and ``pids``; ``cpu`` too for a CPU share), named in the setting, or found as this
  process's own cgroup when that one qualifies (``auto``);
- cgroup v1 (``auto`` only): this process's own cgroups of the ``memory`` and ``pids``
  hierarchies (and ``cpu``, if writable), when it may make children there.

Each sandbox gets ``gradacc-grader-<random>`` under them with ``memory`` (swap included where the
host counts it: the sandbox's tmpfs is counted too, as shared memory), ``pids`` and a CPU quota;
the sandbox's keeper joins it before forking. Without one (``off``, or nothing writable), the
sandbox still holds each process to ``RLIMIT_AS`` and the grading to ``RLIMIT_NPROC``
processes: a total of at most pids x memory + disk (docs/security.md)."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)
ROOT = Path("/sys/fs/cgroup")
SETTING = "GRADACC_GRADER_CGROUP"
PERIOD_US = 100_000
# v1 file names of each limit, by controller; v2 names them in one directory.
V1_LIMITS = {
    "memory": ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"),
    "pids": ("pids.max",),
    "cpu": ("cpu.cfs_period_us", "cpu.cfs_quota_us"),
}


@dataclass(frozen=True)
class Hierarchy:
    """Where sandboxes' cgroups are made: v2, one parent; v1, a parent per controller."""

    version: int
    parents: dict[str, Path]


@dataclass(frozen=True)
class Budget:
    """One sandbox's cgroups (none without a hierarchy): the files its keeper joins."""

    dirs: tuple[Path, ...] = ()
    version: int = 0
    procs_files: list[str] = field(default_factory=list)

    def out_of_memory(self) -> bool:
        """Whether the kernel killed one of the grading's processes for its memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for folder in self.dirs:
            for line in _read(folder / name).splitlines():
                key, _, count = line.partition(" ")
                if key == "oom_kill" and count.strip() not in ("", "0"):
                    return True
        return False


@lru_cache(maxsize=4)
def find_hierarchy(setting: str) -> Hierarchy | None:
    """The hierarchy ``setting`` names (``off``, ``auto`` or a v2 directory), or None; a named
    directory that cannot serve is a ValueError naming the setting (the grader fails closed)."""
    if setting == "off":
        return None
    if setting != "auto":
        folder = Path(setting)
        if not _v2_usable(folder):
            raise ValueError(
                f"{SETTING}={setting} is not a writable cgroup v2 directory whose "
                "cgroup.subtree_control enables memory and pids"
            )
        return Hierarchy(2, {"v2": folder})
    own = _own_cgroups()
    if "" in own and _v2_usable(ROOT / own[""].lstrip("/")):
        return Hierarchy(2, {"v2": ROOT / own[""].lstrip("/")})
    parents = {c: ROOT / c / own[c].lstrip("/") for c in V1_LIMITS if c in own}
    if all(c in parents and os.access(parents[c], os.W_OK) for c in ("memory", "pids")):
        writable = {c: p for c, p in parents.items() if os.access(p, os.W_OK)}
        return Hierarchy(1, writable)
    return None


@contextmanager
def grading_budget(
    hierarchy: Hierarchy | None, *, memory_bytes: int, pids: int, cpus: float
) -> Iterator[Budget]:
    """A cgroup (or one per v1 controller) for one sandbox, removed on the way out with
    anything still inside it."""
    if hierarchy is None:
        yield Budget()
        return
    name = f"gradacc-grader-{secrets.token_hex(6)}"
    dirs = []
    try:
        for controller, parent in hierarchy.parents.items():
            folder = parent / name
            folder.mkdir()
            dirs.append(folder)
            _limit(folder, hierarchy.version, controller, memory_bytes, pids, cpus)
        yield Budget(tuple(dirs), hierarchy.version, [str(d / "cgroup.procs") for d in dirs])
    finally:
        for folder in dirs:
            _remove(folder)


def _limit(
    folder: Path, version: int, controller: str, memory_bytes: int, pids: int, cpus: float
) -> None:
    quota = str(max(1000, int(cpus * PERIOD_US)))
    if version == 2:
        enabled = _read(folder.parent / "cgroup.subtree_control").split()
        _write(folder / "memory.max", str(memory_bytes))
        _write(folder / "memory.swap.max", "0", optional=True)
        _write(folder / "pids.max", str(pids))
        if "cpu" in enabled:
            _write(folder / "cpu.max", f"{quota} {PERIOD_US}")
        return
    values = {
        "memory": (str(memory_bytes), str(memory_bytes)),
        "pids": (str(pids),),
        "cpu": (str(PERIOD_US), quota),
    }[controller]
    for index, (file, value) in enumerate(zip(V1_LIMITS[controller], values, strict=True)):
        _write(folder / file, value, optional=controller == "memory" and index == 1)


def _remove(folder: Path) -> None:
    """Kill what is left (nothing, normally: the namespace ends with its keeper), then rmdir."""
    for _ in range(50):
        for pid in _read(folder / "cgroup.procs").split():
            with suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    log.warning("grader cgroup %s could not be removed", folder.name)


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path by controller (``""``: the v2 one)."""
    found: dict[str, str] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _v2_usable(folder: Path) -> bool:
    enabled = _read(folder / "cgroup.subtree_control").split()
    return {"memory", "pids"} <= set(enabled) and os.access(folder, os.W_OK)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str, *, optional: bool = False) -> None:
    try:
        path.write_text(value)
    except OSError:
        if not optional:
            raise
