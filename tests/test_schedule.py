"""The suite hands its costliest files out first (``tests/schedule.py``): the order itself, and
xdist's loadfile scheduler following it in a real two-process run."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT
from tests.schedule import COST_S, UNKNOWN_S, costliest_first


@dataclass
class Item:
    path: Path
    name: str


def test_files_go_costliest_first_each_whole_and_in_order() -> None:
    heavy, light = (max(COST_S, key=COST_S.__getitem__), min(COST_S, key=COST_S.__getitem__))
    assert COST_S[heavy] > UNKNOWN_S > COST_S[light]
    root = Path("/repo")
    items = [Item(root / light, "a"), Item(root / "tests/new.py", "b"), Item(root / heavy, "c"),
             Item(root / light, "d"), Item(root / heavy, "e"), Item(Path("/elsewhere.py"), "f")]  # fmt: skip
    ordered = [item.name for item in costliest_first(items, root)]
    # The heaviest file whole and first; unknown files (and files outside the root) in the
    # middle, in their order; the light file last, its tests in their order.
    assert ordered == ["c", "e", "b", "f", "a", "d"]


TEST = """import os

def test_{n}():
    with open(os.environ["SCHEDULE_LOG"], "a") as log:
        log.write(os.environ["PYTEST_XDIST_WORKER"] + " " + __file__ + "\\n")
"""


def test_xdist_loadfile_hands_the_costliest_files_out_first(tmp_path: Path) -> None:
    """Two one-test files named as the suite's two costliest, and files of four tests each that
    xdist on its own would hand out first (it orders files by their number of tests): with the
    suite's hooks, each process starts on one of the two costliest."""
    costliest = sorted(COST_S, key=COST_S.__getitem__, reverse=True)[:2]
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the rootdir, for the table's paths
    (tmp_path / "conftest.py").write_text(
        "from tests.schedule import pytest_collection_modifyitems, pytest_configure\n"
    )
    # Named on the command line after the others: collected last, handed out first.
    files = {f"many/test_many_{n}.py": 4 for n in range(3)} | {name: 1 for name in costliest}
    for name, tests in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("\n".join(TEST.format(n=n) for n in range(tests)))
    log = tmp_path / "started.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SCHEDULE_LOG": str(log)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadfile", *files],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    first: dict[str, str] = {}
    for line in log.read_text().splitlines():
        worker, path = line.split(" ", 1)
        first.setdefault(worker, Path(path).relative_to(tmp_path).as_posix())
    assert sorted(first.values()) == sorted(costliest), log.read_text()
