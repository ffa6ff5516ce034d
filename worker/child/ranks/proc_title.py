"""What ``/proc`` shows of a forked rank: what it showed of a rank that torchrun exec'd.

A forked process keeps its parent's command line, environment block and name in ``/proc``, and
the ranks are found there (``ps``, ``pgrep -f worker.child.ranks.main``, the tests' psutil
look-ups, ``/proc/PID/environ`` for a process's ``RANK``). Each rank forked by the agent
(``worker.child.ranks.forked``) rewrites them in place: the command line becomes the one torchrun
would have run (it is shorter than the agent's, which holds it), and the rank's own variables
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``...) go into room the launcher left at the end of the
agent's environment block (``ENV_ROOM``, popped from the agent's ``os.environ`` at once, so no
code reads or passes it on). Only the bytes in ``/proc``'s view change: Python's ``os.environ``
and libc's ``environ`` hold the real values. Torch-free: the launcher imports it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

ENV_ROOM = "GRADACC_RANK_ENVIRON_ROOM"
ENV_ROOM_BYTES = 2048  # torchrun's variables for a rank take ~1 KiB
_PR_SET_NAME = 15


def env_room() -> dict[str, str]:
    """For the agent's environment, last (so that the rank's variables end the block)."""
    return {ENV_ROOM: "." * ENV_ROOM_BYTES}


@contextmanager
def room_in_environment() -> Iterator[None]:
    """Around the start of the worker's fork server (the agent forked from a job's training
    process has the server's environment block): the room is in its block, not in the worker's
    ``os.environ`` afterwards (the server's preload drops it from its own)."""
    os.environ.update(env_room())
    try:
        yield
    finally:
        os.environ.pop(ENV_ROOM, None)


def fits(argv: Sequence[str]) -> bool:
    """``argv`` fits where ``/proc`` shows this process's command line (a process forked from
    this one can show it whole)."""
    start, end = _stat_fields(45, 46)
    return len(_joined(argv)) <= end - start


def show_as(argv: Sequence[str], variables: Mapping[str, str]) -> None:
    """This process's ``/proc`` command line becomes ``argv``, its name ``argv[0]``'s base name,
    and ``variables`` end its environment block, where there is room. Best effort: a kernel that
    refuses a write to ``/proc/self/mem`` leaves the parent's."""
    try:
        arg_start, arg_end, env_start = _stat_fields(45, 46, 47)
        block = Path("/proc/self/environ").read_bytes()
        with open("/proc/self/mem", "r+b", buffering=0) as memory:
            memory.seek(arg_start)
            memory.write(_fitted(_joined(argv), arg_end - arg_start))
            room = _room(block) if variables else None  # an agent's: left for its ranks
            if room is not None:
                memory.seek(env_start + room[0])
                memory.write(_entries(variables, room[1] - room[0]))
    except OSError:
        pass
    name = os.path.basename(argv[0]).encode()[:15]
    ctypes.CDLL(None).prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def _stat_fields(*indices: int) -> list[int]:
    """``/proc/self/stat``'s fields after the name (0: the state), as numbers."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return [int(fields[i]) for i in indices]


def _joined(argv: Sequence[str]) -> bytes:
    return b"\0".join(os.fsencode(a) for a in argv) + b"\0"


def _fitted(data: bytes, size: int) -> bytes:
    """``data`` in ``size`` bytes: cut (ending in a NUL) or padded with NULs."""
    return data[: size - 1] + b"\0" if len(data) > size else data.ljust(size, b"\0")


def _room(block: bytes) -> tuple[int, int] | None:
    """Where ``ENV_ROOM``'s value lies in the environment block (offsets), if it is there."""
    marker = ENV_ROOM.encode() + b"="
    if block.startswith(marker):
        at = 0
    else:
        found = block.find(b"\0" + marker)
        if found < 0:
            return None
        at = found + 1
    start = at + len(marker)
    end = block.find(b"\0", start)
    return start, end if end >= 0 else len(block)


def _entries(variables: Mapping[str, str], size: int) -> bytes:
    """NUL, then each ``NAME=value`` that fits and a NUL after it; NULs to ``size``. The first
    NUL ends the room's own (now empty) value."""
    data = b""
    for name, value in variables.items():
        entry = b"\0" + os.fsencode(f"{name}={value}")
        if len(data) + len(entry) + 1 > size:
            break
        data += entry
    return data.ljust(size, b"\0")
