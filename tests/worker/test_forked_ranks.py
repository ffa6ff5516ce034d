"""torchrun's agent forks each rank from itself (``worker.child.ranks.forked``) instead of
starting a new interpreter, and the ranks fail as cold ones do: the same exit statuses and
signals reach the failures file the launcher reads, and ``/proc`` shows a rank as torchrun's
command would have (its command line, its ``RANK``). A stand-in rank (``rank_probe``) that
imports nothing heavy keeps each run to seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from worker.child.ranks.proc_title import env_room

PROBE = "tests.worker.rank_probe"
# The agent, its rank module swapped for the probe (nothing to preload); "cold" undoes the fork.
AGENT = """
import sys
import worker.child.ranks.agent as agent
import worker.child.ranks.forked as forked
forked.RANK_MODULE, forked.PRELOAD = {probe!r}, ()
if {cold}:
    agent.fork_ranks = lambda: None
sys.exit(agent.main(sys.argv[1:]))
"""


def _run(tmp_path: Path, mode: str, *, cold: bool = False) -> tuple[int, list[dict[str, Any]]]:
    failures = tmp_path / "failures.json"
    code = AGENT.format(probe=PROBE, cold=cold)
    command = [sys.executable, "-c", code, str(failures), "--standalone", "--nproc_per_node=2",
               "-m", PROBE, str(tmp_path)]  # fmt: skip
    env = {**os.environ, "PROBE_MODE": mode, **env_room()}
    agent = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    found = json.loads(failures.read_text()) if failures.is_file() else []
    return agent.returncode, found


def _seen(tmp_path: Path, rank: int) -> dict[str, Any]:
    seen: dict[str, Any] = json.loads((tmp_path / f"rank{rank}.json").read_text())
    return seen


@pytest.mark.parametrize("mode", ["kill", "exit"])
def test_forked_ranks_fail_as_cold_ones_and_look_the_same(tmp_path: Path, mode: str) -> None:
    for run in ("forked", "cold"):
        (tmp_path / run).mkdir()
    forked = _run(tmp_path / "forked", mode)
    cold = _run(tmp_path / "cold", mode, cold=True)  # the reference: torchrun's own start
    rank1: dict[str, Any] = (
        {"exitcode": -9, "signal": "SIGKILL"} if mode == "kill" else {"exitcode": 7, "signal": None}
    )
    expected = [{"rank": 0, "exitcode": -15, "signal": "SIGTERM"}, {"rank": 1, **rank1}]
    assert forked == cold == (1, expected)
    for rank in (0, 1):
        seen, reference = _seen(tmp_path / "forked", rank), _seen(tmp_path / "cold", rank)
        assert (seen.pop("forked"), reference.pop("forked")) == (True, False)
        # /proc: the same command line (the output folder aside), RANK and name
        assert seen["cmdline"] == [sys.executable, "-u", "-m", PROBE, str(tmp_path / "forked")]
        assert reference["cmdline"] == [sys.executable, "-u", "-m", PROBE, str(tmp_path / "cold")]
        assert seen["environ_rank"] == reference["environ_rank"] == str(rank)
        assert seen["name"] == reference["name"]
        assert seen["parent"] != reference["parent"]  # two agents
