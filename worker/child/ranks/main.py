"""One rank of a multi-process job, started by torchrun (``worker.child.ranks.launcher``).

Rank 0 is the job's reporter: it runs ``worker.child.entry.main`` (progress, metrics, events and
the outcome in the database, stop requests) and leaves its exit status in ``RANK0_EXIT_FILE``.
The other ranks only train: the core gives rank 0 the metrics of all, and they stop when it does.
"""

from __future__ import annotations

import contextlib
import os
import sys

from gradacc.db import session_scope
from gradacc.settings import Settings, get_settings
from gradacc.tinker import placement
from trainer_core.spec.callbacks import NULL_CALLBACK, never_stop
from trainer_core.spec.errors import JobError
from trainer_core.spec.outputs import RANK0_EXIT_FILE
from trainer_core.spec.replan import RanksReplan
from worker import exit_codes
from worker.child.logs import configure_job_logging
from worker.child.outcome import fail_early, running_spec, train_and_record
from worker.child.ranks.fork_popen import die_with_parent
from worker.child.ranks.launcher import rank_error_file
from worker.child.reporting import describe_error
from worker.child.training import run_training


def main(argv: list[str]) -> int:
    die_with_parent()  # torchrun gone (SIGKILLed with the job's group): no rank survives it
    if os.getppid() == 1:
        return exit_codes.CRASHED  # torchrun died while this rank started: nobody to train with
    (job_id,) = argv
    configure_job_logging()
    settings = get_settings()
    rank0 = os.environ.get("RANK", "0") == "0"
    with session_scope(settings) as session:
        host = placement.host_processes(session, job_id) is not None
    if host:  # a Tinker session's host over several ranks
        from worker.tinker.host import serve_job  # imports torch: only in a rank

        code = serve_job(settings, job_id)
        return _leave(settings, job_id, code) if rank0 else code
    try:
        spec = running_spec(settings, job_id)
    except JobError as exc:  # an uploaded file it names is gone: rank 0 records it
        return _leave(settings, job_id, fail_early(settings, job_id, exc)) if rank0 else 0
    if spec is None:
        return exit_codes.OUTCOME_RECORDED  # cancelled meanwhile: the worker ends the group
    try:
        if rank0:
            return _leave(settings, job_id, train_and_record(settings, job_id, spec))
        # The other ranks share rank 0's settings, the data cache included: a cached data set is
        # not tokenized again on each rank (a cold one is built by each, the first one kept).
        with contextlib.suppress(JobError):  # a bad spec or data set fails on rank 0: recorded
            run_training(spec, settings, job_id, callback=NULL_CALLBACK, should_stop=never_stop)
    except RanksReplan:  # out of memory: torchrun stops the others, the launcher restarts all
        return exit_codes.REPLAN
    except Exception as exc:  # the launcher names it in the restart's cause
        (settings.jobs_dir / job_id / rank_error_file(os.environ.get("RANK", "0"))).write_text(
            describe_error(exc)
        )
        raise
    return exit_codes.OUTCOME_RECORDED


def _leave(settings: Settings, job_id: str, code: int) -> int:
    """Rank 0's exit status goes to the launcher through a file: torchrun counts any status but 0
    as a failure and would tear the other ranks down early."""
    (settings.jobs_dir / job_id / RANK0_EXIT_FILE).write_text(str(code))
    return 0 if code in (exit_codes.OUTCOME_RECORDED, exit_codes.PREEMPTED) else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
