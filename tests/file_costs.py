"""Each test file's cost, for ``COST_S`` (``tests/schedule.py``): a pytest plugin, off unless named.

``pytest -p tests.file_costs -n 2 --dist loadfile FILES`` (or without ``-n``). Each test process
moves itself into a cgroup of its own (cgroup v1 ``cpuacct``, writable here), so the CPU it
counts is that of the process and of every process started from it, orphans included (a fork
server, a predict server, torchrun's ranks): ``/usr/bin/time`` counts only the children waited
for. A file's figure is the cgroup's CPU and the wall time from its first test to the next
file's first test (its module fixtures' teardown included), appended as a JSON line to
``$GRADACC_FILE_COSTS`` (default ``file_costs.jsonl``). The first file of a process also pays
for the session's fixtures. Where the cgroup cannot be made, the plugin says so and does nothing.
Measure alone (nothing else running) and on a quiet machine: two files in one run share the
cores, so their wall times include waiting for each other.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class FileCosts:
    def __init__(self, group: Path) -> None:
        self.group = group
        self.file: str | None = None
        self.cpu_at = 0.0
        self.wall_at = 0.0
        self.costs: dict[str, tuple[float, float]] = {}

    def cpu(self) -> float:
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    def close_file(self) -> None:
        if self.file is not None:
            cpu, wall = self.costs.get(self.file, (0.0, 0.0))
            cpu += self.cpu() - self.cpu_at
            wall += time.monotonic() - self.wall_at
            self.costs[self.file] = (cpu, wall)

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        file = nodeid.split("::")[0]
        if file != self.file:
            self.close_file()
            self.file, self.cpu_at, self.wall_at = file, self.cpu(), time.monotonic()

    def pytest_sessionfinish(self) -> None:
        self.close_file()
        with open(os.environ.get("GRADACC_FILE_COSTS", "file_costs.jsonl"), "a") as out:
            for file, (cpu, wall) in self.costs.items():
                out.write(json.dumps({"file": file, "cpu_s": round(cpu, 1),
                                      "wall_s": round(wall, 1)}) + "\n")  # fmt: skip

    def pytest_unconfigure(self) -> None:
        try:  # back to the root group, and this one removed unless a straggler is still in it
            (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
            self.group.rmdir()
        except OSError:
            pass


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # xdist's controller runs no test: each test process counts its own
    group = CPUACCT / f"gradacc-file-costs-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))  # every thread, and what it starts
    except OSError as exc:
        print(f"tests.file_costs: no cgroup of its own ({exc}): nothing measured")
        return
    config.pluginmanager.register(FileCosts(group), "file-costs")
