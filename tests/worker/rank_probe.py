"""A stand-in for a rank of a job (``worker.child.ranks.main``) for ``test_forked_ranks``: it
records what ``/proc`` shows of it and whether it was forked from the agent, then ends as
``PROBE_MODE`` says (rank 1 exits with status 7, or is killed with SIGKILL; rank 0 waits for
torchrun to stop it)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil


def main(argv: list[str]) -> int:
    (out,) = argv
    rank = os.environ["RANK"]
    me = psutil.Process()
    seen = {
        "forked": "worker.child.ranks.agent" in sys.modules,  # a new interpreter has not loaded it
        "parent": me.ppid(),
        "agent_cmdline": [a for a in psutil.Process(me.ppid()).cmdline() if a],
        "cmdline": [a for a in me.cmdline() if a],  # a forked rank's is padded with NULs
        "environ_rank": me.environ().get("RANK"),
        "name": me.name(),
    }
    written = Path(out, f"rank{rank}.json")
    Path(out, f".rank{rank}.tmp").write_text(json.dumps(seen))
    Path(out, f".rank{rank}.tmp").rename(written)  # whole or absent when torchrun stops us
    mode = os.environ.get("PROBE_MODE")
    if rank == "1" and mode:
        # Fail only once rank 0 has recorded itself: on a busy machine a cold rank 0 is still
        # importing when rank 1 dies, and torchrun stops it before it writes (seen under load).
        deadline = time.monotonic() + 60
        while not Path(out, "rank0.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if rank == "1" and mode == "exit":
        return 7
    if rank == "1" and mode == "kill":
        me.kill()
    if mode:
        time.sleep(60)  # stopped by torchrun (SIGTERM) once rank 1 failed
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
