"""The executor seam: what runs a claimed job, behind one small interface (docs/distributed.md,
Executors).

gradacc schedules (claims, orders, records, serves); an executor places and runs. The Celery task
that claimed a job (``worker.consumer.tasks``) asks its executor, in order:

1. ``admit(job, worker=...)``: hold the job's machines, all of them at once or none (a gang over
   M machines), and say where it runs (a ``Placement``), or why it does not run now (then the
   executor has queued it again, or it is gone: cancelled, taken over);
2. ``start(placement, log_path=...)``: start the job's N nodes x G processes with the
   placement's rendezvous, each node running torchrun of the job's ranks on its machine (or the
   one training process; locally ``worker.child.entry``). An ``Execution`` comes back: its exit
   status (``wait``), a preempt request, a stop handle and its log files. The task's supervisor
   (``worker.consumer.supervisor``) beats the heartbeat, watches for a cancel and records the
   outcome, the same for every executor;
3. ``release(placement, worker=...)``: the run is over; no machine stays held for it.

At POST, ``gradacc.executors.select.cluster_capacity`` asks the chosen executor's cluster which
machines exist (busy ones too), and ``check_fits`` refuses (422) a job that could never be
placed instead of letting it wait. That half lives in the kernel because the API may use it and
may not import ``worker``.

The rule for implementations: the interface is not a vehicle for code reuse. An executor is an
adapter from these calls to its engine; what every executor shares (the claim, the started
event, supervision, the outcome's record, restarts from the last checkpoint) stays in the task
and the kernel.

Implementations, chosen by ``GRADACC_EXECUTOR`` and imported only when chosen:

- ``local`` (the default): this worker's own processes (``worker.consumer.executors.local``);
  a gang gathers workers of other machines through the database (``gradacc.scheduling.gang``).
  Capacity: the live rows of the workers table (``gradacc.scheduling.capacity``).
- ``ray``: a placement group on the Ray cluster at ``GRADACC_RAY_ADDRESS``: the module
  ``worker.consumer.executors.ray_executor`` defines ``executor(settings, app) -> Executor``;
  its capacity comes from ``gradacc.executors.ray_cluster``, which defines
  ``capacity(settings) -> Capacity`` (it asks Ray, torch-free, and may be imported by the API).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class JobShape:
    """What an executor needs to know of a claimed job: its id and its size."""

    id: str
    num_machines: int
    processes_per_machine: int  # the devices it takes on each machine (W / M)
    attempts: int = 1  # this claim's attempt, for the executor's own names (a Ray group's)

    @property
    def num_processes(self) -> int:
        """W, the world size: processes per machine x machines."""
        return self.processes_per_machine * self.num_machines


@dataclass(frozen=True)
class Placement:
    """Where a claimed job runs: ``num_machines`` nodes of ``processes_per_machine`` processes.

    ``rendezvous``: ``host:port`` of node 0, whose torchrun agent hosts the c10d store the nodes
    meet at; None for a job on one machine (``torchrun --standalone``, or one process).
    ``machines``: where each node runs, node 0 first, in the executor's names (a machine, a Ray
    node id). They are the operator's: logged, never in the tenant's events.
    """

    job_id: str
    num_machines: int
    processes_per_machine: int
    rendezvous: str | None = None
    machines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Admission:
    """The answer to ``admit``: a placement, or None and why (the task's log line)."""

    placement: Placement | None
    note: str = "placed"


class Execution(Protocol):
    """A started job: every node's processes, as one thing to wait for, preempt and stop."""

    @property
    def pid(self) -> int | None:
        """The process on this machine that stands for the job (recorded on the job, shown to
        the operator); None when none of it runs here."""
        ...

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status once every node ended: node 0's, as ``worker.exit_codes`` reads it
        (negative: killed by that signal; ``RESTART``: a rank or a node died and the restart is
        recorded, so the job goes back to the queue). Raises ``subprocess.TimeoutExpired`` while
        it still runs after ``timeout`` seconds."""
        ...

    def preempt(self) -> None:
        """Ask it to checkpoint at the end of the current window and exit ``PREEMPTED``
        (locally SIGUSR1; the ranks agree on the window). Returns at once."""
        ...

    def stop(self, grace_s: float) -> None:
        """End all of it now: ask, and kill whatever is left after ``grace_s``. Returns once no
        process of it is left on any node (its exit status is then ``wait()``'s)."""
        ...

    def logs(self) -> list[Path]:
        """The files its nodes' output goes to (node 0's is the ``log_path`` it was started
        with: the job's ``train.log``, which the API serves)."""
        ...


class Executor(Protocol):
    """What runs claimed jobs on one engine (this worker's machine, a Ray cluster...)."""

    name: str

    def admit(self, job: JobShape, *, worker: str) -> Admission:
        """Hold the job's machines, all at once or none; called by the worker that claimed it."""
        ...

    def start(self, placement: Placement, *, log_path: Path) -> Execution:
        """Start the job's nodes as placed; their output goes to ``log_path`` (node 0's)."""
        ...

    def release(self, placement: Placement, *, worker: str) -> None:
        """The run is over (or never started): no machine stays held for it."""
        ...


@dataclass(frozen=True)
class Capacity:
    """The machines a cluster has for jobs now, busy ones too: each one's devices."""

    devices: tuple[int, ...]  # one entry per machine

    @property
    def largest(self) -> int:
        return max(self.devices, default=0)

    def machines_with(self, devices: int) -> int:
        """How many machines have at least ``devices`` devices."""
        return sum(1 for most in self.devices if most >= devices)
