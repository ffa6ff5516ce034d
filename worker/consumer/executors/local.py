"""The ``local`` executor (``GRADACC_EXECUTOR=local``, the default): this worker's own machine.

- ``admit``: a job on one machine is placed here at once. A job over M machines is gang
  admission (``worker.consumer.gang_node``, ``gradacc.scheduling.gang``): this worker opens the
  gang, sends M-1 join messages, and the job is placed once every machine's slot is held. A gang
  let go is queued again by it (not placed); one that yielded this machine to an older gang job
  runs that job's node here instead, and its outcome is the admission's note.
- ``start``: the training process, forked from the worker's fork server
  (``worker.consumer.launcher``), which runs torchrun of this machine's ranks for several. The
  other machines' workers start their own node in the same way when the gang completes.
- ``release``: a gang's slots go.
"""

from __future__ import annotations

from pathlib import Path

from celery import Celery

from gradacc.executors.protocol import Admission, Execution, JobShape, Placement
from gradacc.settings import Settings
from worker.consumer import gang_node, launcher


class LocalExecutor:
    name = "local"

    def __init__(self, settings: Settings, app: Celery) -> None:
        self.settings = settings
        self.app = app

    def admit(self, job: JobShape, *, worker: str) -> Admission:
        if job.num_machines == 1:
            return Admission(Placement(job.id, 1, job.processes_per_machine))
        settings = self.settings
        gathered = gang_node.open_and_gather(settings, self.app, job=job, worker=worker)
        if gathered.outcome == "complete":
            return Admission(gang_node.placement_of(settings, job))
        gang_node.end_of_gang(settings, job_id=job.id, worker=worker)
        if gathered.outcome == "yielded" and gathered.older is not None:
            ran = gang_node.join_and_run(
                settings, self.app, job_id=gathered.older, worker=worker, executor=self
            )
            return Admission(None, ran)
        return Admission(None, f"gang {gathered.outcome}")

    def start(self, placement: Placement, *, log_path: Path) -> Execution:
        return launcher.start(self.settings, job_id=placement.job_id, log_path=log_path)

    def release(self, placement: Placement, *, worker: str) -> None:
        if placement.num_machines > 1:
            gang_node.end_of_gang(self.settings, job_id=placement.job_id, worker=worker)
