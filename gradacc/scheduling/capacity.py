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

A one-process, one-machine job is never checked: any worker holds it, and it may be POSTed
before any worker is up (it waits queued). A job over several devices or machines with no live
worker at all is refused, as it always was: nothing live could tell that it fits.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from gradacc.errors import InvalidRequest
from gradacc.settings import Settings
from gradacc.workers import live_machines
from trainer_core.spec.job import JobSpec


def machines_that_fit(session: Session, *, devices: int, settings: Settings) -> int:
    """How many distinct live machines have a worker with at least ``devices`` devices."""
    machines = live_machines(session, alive_s=settings.worker_alive_s, queue=settings.queue)
    return sum(1 for most in machines.values() if most >= devices)


def check_devices(spec: JobSpec, *, session: Session, settings: Settings) -> None:
    """Refuse (422, ``num_processes``/``num_machines``) a job the live workers cannot hold."""
    needed = spec.processes_per_machine  # a gang job holds that many on each machine
    if needed <= 1 and spec.num_machines == 1:
        return
    machines = live_machines(session, alive_s=settings.worker_alive_s, queue=settings.queue)
    largest = max(machines.values(), default=0)
    if needed > largest and spec.num_machines > 1:
        raise InvalidRequest(
            f"no live worker has the {needed} devices a machine of this job needs "
            f"(num_processes / num_machines; the largest has {largest})",
            param="num_machines",
        )
    if needed > largest:
        raise InvalidRequest(
            f"no live worker has {spec.num_processes} devices (the largest has {largest})",
            param="num_processes",
        )
    fitting = sum(1 for most in machines.values() if most >= needed)
    if spec.num_machines > fitting:  # machine names are the operator's: only how many
        raise InvalidRequest(
            f"the job needs {spec.num_machines} machines with {needed} devices each; "
            f"{fitting} live machines have that many",
            param="num_machines",
        )
