"""The training process for one job (or a Tinker session's host, ``worker.tinker.host``): ``main([job_id])``, in a process forked from the worker's
fork server (``worker.fork_server.child``), or ``python -m worker.child.entry JOB_ID`` (cold).

Exit status (``worker.exit_codes``): OUTCOME_RECORDED, PREEMPTED (checkpoint kept), or CRASHED.
"""

from __future__ import annotations

import logging
import sys

from gradacc.db import session_scope
from gradacc.jobs.records import add_event
from gradacc.scheduling.gang import node_of
from gradacc.settings import Settings, get_settings
from gradacc.tables import Job, JobStatus
from gradacc.tinker import placement
from trainer_core.spec.errors import JobError
from worker import exit_codes
from worker.child.logs import configure_job_logging
from worker.child.outcome import fail_early, running_spec, train_and_record
from worker.child.ranks.launcher import Rendezvous, launch_ranks

log = logging.getLogger(__name__)


def main(argv: list[str]) -> int:
    (job_id,) = argv
    configure_job_logging()
    settings = get_settings()
    with session_scope(settings) as session:
        processes = placement.host_processes(session, job_id)
    if processes is not None:  # a Tinker session's host
        if processes > 1:  # its ranks (worker.tinker.ranks), each in worker.child.ranks.main
            return launch_ranks(settings, job_id, processes)
        # Imported here: it loads torch, which the worker's own process never imports.
        from worker.tinker.host import serve_job

        return serve_job(settings, job_id)
    try:
        spec = running_spec(settings, job_id)
    except JobError as exc:  # an uploaded file it names is gone
        return fail_early(settings, job_id, exc)
    if spec is None:  # not ours to train (any more); paused before it began: nothing to keep
        return exit_codes.PREEMPTED if _paused(settings, job_id) else exit_codes.OUTCOME_RECORDED
    if spec.num_machines > 1:
        rendezvous = _rendezvous(settings, job_id)
        if rendezvous is None:  # this machine's slot is gone: the gang was released or taken over
            return exit_codes.OUTCOME_RECORDED
        return launch_ranks(settings, job_id, spec.processes_per_machine, rendezvous)
    if spec.num_processes > 1:
        return launch_ranks(settings, job_id, spec.num_processes)
    return train_and_record(settings, job_id, spec)


def _rendezvous(settings: Settings, job_id: str) -> Rendezvous | None:
    """This machine's node of the job's gang (``gradacc.scheduling.gang``), as torchrun's rendezvous."""
    with session_scope(settings) as session:
        node = node_of(session, job_id=job_id, machine=settings.machine)
    if node is None:
        return None
    endpoint = f"{node.endpoint_host}:{node.port}"
    return Rendezvous(node.num_machines, node.node_rank, endpoint, local_addr=node.host)


def _paused(settings: Settings, job_id: str) -> bool:
    """Paused between its claim and here: a preemption with nothing trained (the attempt is not
    counted as a failure)."""
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.PAUSED:
            return False
        add_event(session, job_id=job_id, kind="preempted", message="paused before it began")
        session.commit()
        return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
