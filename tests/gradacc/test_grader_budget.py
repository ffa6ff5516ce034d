"""One grading has one budget for all its processes, and only its keeper speaks for it (the
security review's N2 and N9). A grader that forks children which each hold 96 MiB used to get
as many as it asked for (the review: +4.9 GiB of host memory from one call); now, with a cgroup
(``auto``: this machine lets the worker make one), its processes together stay within
``memory_bytes``, and without one (``off``) the kernel's process limit under the sandbox's own
uid and user namespace holds it to ``pids`` processes of at most ``memory_bytes`` each. The
sum of the sandbox's resident memory is sampled from outside, every 10 ms."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.api.sandboxes import PeakMemory
from trainer_core.graders import Grading, SandboxLimits, run_grader
from trainer_core.graders.budget import find_hierarchy
from trainer_core.spec.graders import parse_grader

MiB = 1 << 20
FORKER = """
import os, select, time

def grade(sample, item):
    readable, writable = os.pipe()
    children = []
    for _ in range(12):
        try:
            pid = os.fork()
        except OSError:  # the process limit
            break
        if pid == 0:
            try:
                block = b"x" * (96 << 20)
                os.write(writable, b"k")
            except MemoryError:
                os._exit(1)
            time.sleep(60)
            os._exit(0)
        children.append(pid)
        if not select.select([readable], [], [], 10)[0]:
            break
        os.read(readable, 1)
    time.sleep(0.3)
    return sum(os.waitpid(pid, os.WNOHANG) == (0, 0) for pid in children)
"""


def _grade(source: str, limits: SandboxLimits) -> tuple[float, list[str], dict[str, str]]:
    grader = parse_grader({"type": "python", "name": "p", "source": source})
    result = run_grader(grader, "x", None, Grading(limits=limits))
    return result.reward, result.failed_kinds, result.details


@pytest.mark.parametrize("cgroup", ["auto", "off"])
def test_a_forking_grader_is_held_to_one_budget(cgroup: str) -> None:
    if cgroup == "auto" and find_hierarchy("auto") is None:
        pytest.skip("this machine lets no process make a cgroup")
    memory, pids, disk = 256 * MiB, 3 if cgroup == "off" else 64, 4 * MiB
    limits = SandboxLimits(wall_s=60, cpu_s=30, memory_bytes=memory, disk_bytes=disk,
                           pids=pids, cgroup=cgroup)  # fmt: skip
    with PeakMemory("sandboxes") as seen:
        reward, kinds, details = _grade(FORKER, limits)
    keeper_and_unshare = 48 * MiB  # the trusted processes, outside the grader's own count
    bound = memory if cgroup == "auto" else pids * memory + disk
    assert seen.peak <= bound + keeper_and_unshare, (seen.peak // MiB, kinds, details)
    assert seen.peak > 96 * MiB  # it did measure the children: one at least was held
    if cgroup == "auto":  # past the total, the kernel killed in the grading's cgroup
        assert kinds == ["python_grader_runtime_error"] or reward * 96 * MiB <= memory
    else:  # G and pids - 1 children: the rest could not be forked
        assert (reward, kinds) == (pids - 1, [])


def test_the_grading_s_cgroup_is_gone_after_it() -> None:
    hierarchy = find_hierarchy("auto")
    if hierarchy is None:
        pytest.skip("this machine lets no process make a cgroup")
    before = {p: set(os.listdir(p)) for p in hierarchy.parents.values()}
    limits = SandboxLimits(wall_s=30, cpu_s=10, memory_bytes=256 * MiB, disk_bytes=4 * MiB)
    assert _grade("def grade(sample, item):\n    return 2\n", limits) == (2.0, [], {})
    after = {p: set(os.listdir(p)) for p in hierarchy.parents.values()}
    assert after == before


def test_a_named_cgroup_that_cannot_serve_fails_closed(tmp_path: Path) -> None:
    limits = SandboxLimits(wall_s=10, cpu_s=5, cgroup=str(tmp_path))
    reward, kinds, details = _grade("def grade(sample, item):\n    return 1\n", limits)
    assert (reward, kinds) == (0.0, ["python_grader_server_error"])
    assert "GRADACC_GRADER_CGROUP" in details["python_grader_server_error_type"]


FORGER = """
import json, os

FORGED = json.dumps({"error": "python_grader_server_error", "detail": "forged"}) + "\\n"

def grade(sample, item):
    for fd in range(64):
        try:
            os.write(fd, FORGED.encode())
        except OSError:
            pass
    {end}
"""


@pytest.mark.parametrize(("end", "expected"), [("return 0.5", (0.5, [])),
                         ("os._exit(0)", (0.0, ["python_grader_runtime_error"]))],
                         ids=["returns", "exits"])  # fmt: skip
def test_a_grader_cannot_write_its_own_verdict(end: str, expected: tuple[float, list[str]]) -> None:
    """N9: it writes a server error's line on every descriptor it has. The answer channel is not
    one of them (its keeper holds it), and what it writes on its result pipe is read as a score
    or a runtime error only: a line it forged and left last is a runtime error of its own."""
    limits = SandboxLimits(wall_s=30, cpu_s=10, memory_bytes=512 * MiB, disk_bytes=4 * MiB)
    reward, kinds, _ = _grade(FORGER.replace("{end}", end), limits)
    assert (reward, kinds) == expected
