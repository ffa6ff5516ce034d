"""torchrun's agent, and what it knew when the ranks failed: ``python -m worker.child.ranks.agent
FAILURES_FILE <torchrun arguments>``.

``torch.distributed.run`` stops every rank when one fails, and knows which one failed and how
(its exit status, the signal that killed it); it only logs that. Run in-process here, its
``ChildFailedError`` is caught and the failed ranks go to ``FAILURES_FILE`` (JSON: a list of
``{"rank", "exitcode", "signal"}``), which the launcher reads to describe a restart's cause.

The agent imports what a rank imports once, and torchrun forks each rank from it instead of
starting a new interpreter (``worker.child.ranks.forked``).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run

from worker.child.ranks.fork_popen import die_with_parent
from worker.child.ranks.forked import fork_ranks


def main(argv: list[str]) -> int:
    die_with_parent()  # the launcher gone (SIGKILLed with the job's group): so is the agent
    failures_file, *torchrun_args = argv
    fork_ranks()
    try:
        run(parse_args(torchrun_args))  # type: ignore[no-untyped-call]
    except ChildFailedError as exc:
        failed = [
            {"rank": rank, "exitcode": failure.exitcode, "signal": _signal(failure.exitcode)}
            for rank, failure in sorted(exc.failures.items())
        ]
        Path(failures_file).write_text(json.dumps(failed))
        return 1
    return 0


def _signal(exitcode: int) -> str | None:
    try:
        return signal.Signals(-exitcode).name if exitcode < 0 else None
    except ValueError:
        return f"signal {-exitcode}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
