"""torchrun's agent forks each rank from itself (``worker.child.ranks.forked``) instead of
starting a new interpreter, and the ranks fail as cold ones do: the same exit statuses and
signals reach the failures file the launcher reads, and ``/proc`` shows a rank as torchrun's
command would have (its command line, its ``RANK``). A training process forked from the worker's
fork server (torch imported) forks the agent as well. A stand-in rank (``rank_probe``) that
imports nothing heavy keeps each run to seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from worker.child.ranks.proc_title import ENV_ROOM, env_room

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


# A training process forked from the worker's fork server: torch imported, the room for /proc in
# its environment block only, and a command line long enough to show the agent's (the server's
# is); it forks the agent (worker.child.ranks.launcher._start_agent), which forks the ranks.
WARM_LAUNCHER = """
import os, sys
import torch
os.environ.pop({room!r})
import worker.child.ranks.forked as forked
forked.RANK_MODULE, forked.PRELOAD = {probe!r}, ()
from worker.child.ranks.launcher import _start_agent
out = sys.argv[1]
command = [sys.executable, "-m", "worker.child.ranks.agent", out + "/failures.json",
           "--standalone", "--nproc_per_node=2", "-m", {probe!r}, out]
agent = _start_agent(command, "sqlite:///" + out + "/jobs.sqlite")
print(type(agent).__name__, agent.wait(120))
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


def test_a_warm_launcher_forks_the_agent_too(tmp_path: Path) -> None:
    code = WARM_LAUNCHER.format(room=ENV_ROOM, probe=PROBE)
    env = {**os.environ, "PROBE_MODE": "kill", **env_room()}
    command = [sys.executable, "-c", code, str(tmp_path), "x" * 400]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["ForkedPopen", "1"], done.stderr[-3000:]
    expected = [{"rank": 0, "exitcode": -15, "signal": "SIGTERM"},
                {"rank": 1, "exitcode": -9, "signal": "SIGKILL"}]  # fmt: skip
    assert json.loads((tmp_path / "failures.json").read_text()) == expected
    agent = [sys.executable, "-m", "worker.child.ranks.agent", str(tmp_path / "failures.json"),
             "--standalone", "--nproc_per_node=2", "-m", PROBE, str(tmp_path)]  # fmt: skip
    for rank in (0, 1):
        seen = _seen(tmp_path, rank)
        assert seen["forked"] and seen["agent_cmdline"] == agent
        assert seen["cmdline"] == [sys.executable, "-u", "-m", PROBE, str(tmp_path)]
        assert seen["environ_rank"] == str(rank)
