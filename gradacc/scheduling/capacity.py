"""Can the live workers hold a job? Asked at POST for jobs over several devices or machines.

The answer comes from the workers table (``gradacc.workers``): a worker is live while its
heartbeat is younger than ``worker_alive_s``, and a worker busy training beats like an idle one,
so a job POSTed while every worker trains is judged by the devices those workers have, not
refused because they are busy. Workers of the API's ``GRADACC_QUEUE`` count (those are the ones
that take its jobs). Two checks, both against live machines (``GRADACC_MACHINE``):

- devices: some machine has a worker with ``num_processes / num_machines`` devices (the
  processes a job runs on each machine; ``GRADACC_DEVICES`` of a worker);
- machines: a gang job (``gradacc.scheduling.gang``) over M machines needs M distinct live
  machines with that many devices. One that asks more could never assemble; it is refused
  (``num_machines``) instead of being queued to cycle through gang waits.

The machines come from the chosen executor's cluster (``GRADACC_EXECUTOR``,
``gradacc.executors.select.cluster_capacity``): the workers table above is the ``local``
executor's answer; another executor asks its own cluster (Ray: its live nodes).

A one-process, one-machine job is never checked: any worker holds it, and it may be POSTed
before any worker is up (it waits queued). A job over several devices or machines with no live
worker at all is refused, as it always was: nothing live could tell that it fits.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from gradacc.errors import InvalidRequest
from gradacc.executors.protocol import Capacity
from gradacc.executors.select import cluster_capacity
from gradacc.settings import Settings
from gradacc.workers import live_machines
from trainer_core.spec.job import JobSpec


def machines_that_fit(session: Session, *, devices: int, settings: Settings) -> int:
    """How many distinct live machines have a worker with at least ``devices`` devices."""
    machines = live_machines(session, alive_s=settings.worker_alive_s, queue=settings.queue)
    return sum(1 for most in machines.values() if most >= devices)


def check_devices(spec: JobSpec, *, session: Session, settings: Settings) -> None:
    """Refuse (422, ``num_processes``/``num_machines``) a job the chosen executor's cluster
    cannot hold (``gradacc.executors.select.cluster_capacity``: local, the live workers)."""
    if spec.processes_per_machine <= 1 and spec.num_machines == 1:
        return
    capacity = cluster_capacity(settings, session=session)
    check_fits(capacity, num_machines=spec.num_machines, devices=spec.processes_per_machine)


def check_fits(capacity: Capacity, *, num_machines: int, devices: int) -> None:
    """Refuse a job of ``num_machines`` x ``devices`` (a machine's processes) that ``capacity``
    could never hold; the same words whichever executor answered (a machine: a worker's
    ``GRADACC_MACHINE`` under ``local``, a node under Ray)."""
    largest = capacity.largest
    if devices > largest and num_machines > 1:
        raise InvalidRequest(
            f"no live machine has the {devices} devices a machine of this job needs "
            f"(num_processes / num_machines; the largest has {largest})",
            param="num_machines",
        )
    if devices > largest:
        raise InvalidRequest(
            f"no live machine has {devices} devices (the largest has {largest})",
            param="num_processes",
        )
    fitting = capacity.machines_with(devices)
    if num_machines > fitting:  # machine names are the operator's: only how many
        raise InvalidRequest(
            f"the job needs {num_machines} machines with {devices} devices each; "
            f"{fitting} live machines have that many",
            param="num_machines",
        )
