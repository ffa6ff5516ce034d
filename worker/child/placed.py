"""One node of a job that an executor placed itself (Ray: a task in the job's placement group):
``python -m worker.child.placed JOB_ID NODE_RANK NUM_MACHINES RENDEZVOUS LOCAL_ADDR``.

``worker.child.entry`` finds a gang's rendezvous in the database (the ``local`` executor's gang
slots); here the executor hands it over on the command line. On one machine (``NUM_MACHINES``
1) this is ``worker.child.entry`` itself: torchrun ``--standalone`` or the one process. Over
several, each node runs torchrun of its ranks (``launch_ranks``) meeting at ``RENDEZVOUS``
(node 0's ``host:port``, where its agent hosts the c10d store); node 0 alone decides a restart
after a rank died, as in a gang (``worker.child.ranks.launcher``).
"""

from __future__ import annotations

import sys

from gradacc.settings import get_settings
from trainer_core.spec.errors import JobError
from worker import exit_codes
from worker.child import entry
from worker.child.logs import configure_job_logging
from worker.child.outcome import fail_early, running_spec
from worker.child.ranks.launcher import Rendezvous, launch_ranks


def main(argv: list[str]) -> int:
    job_id, node_rank, num_machines, endpoint, local_addr = argv
    if int(num_machines) == 1:
        return entry.main([job_id])
    configure_job_logging()
    settings = get_settings()
    try:
        spec = running_spec(settings, job_id)
    except JobError as exc:  # an uploaded file it names is gone: node 0 records it
        return fail_early(settings, job_id, exc) if node_rank == "0" else exit_codes.CRASHED
    if spec is None:  # cancelled (or taken over) meanwhile
        return exit_codes.OUTCOME_RECORDED
    rendezvous = Rendezvous(int(num_machines), int(node_rank), endpoint, local_addr=local_addr)
    return launch_ranks(settings, job_id, spec.processes_per_machine, rendezvous)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
