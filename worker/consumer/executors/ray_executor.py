"""The ``ray`` executor (``GRADACC_EXECUTOR=ray``): Ray places and runs a job's nodes; gradacc
claims, records and serves, as for ``local`` (docs/distributed.md, Ray).

- ``admit``: one placement group per job of M bundles, ``STRICT_SPREAD`` (each bundle on a node
  of its own), each bundle the devices a node of the job needs (``ray_cluster.device_resource``:
  GPUs, or CPUs on a cluster without them). Ray creates it whole or not at all; while it waits
  the worker beats the job's heartbeat and watches for a cancel. Not ready within
  ``GRADACC_GANG_WAIT_S``: the group is removed and the job queued again (no attempt counted).
  A small task in bundle 0 answers its node's address and a free port: the rendezvous.
- ``start``: one task per bundle (``ray_node.run_node``) runs that node's torchrun, node rank =
  bundle index, meeting at bundle 0's node, with this worker's settings (``node_env``: what the
  training processes read, as arguments; the secrets in a 0600 file on the shared jobs
  directory): the nodes need none of their own, and one cluster can serve several deployments.
- the ``Execution`` waits on the tasks through Ray: a node whose raylet dies fails its task with
  ``NodeDiedError`` within seconds; the group is removed (the other nodes end with it) and the
  job restarts from its checkpoint (``gradacc.jobs.restarts``, ``max_restarts``), unless node 0
  recorded that restart already (a rank died in a collective).
- ``stop`` cancels the tasks (each ends its node's processes, SIGTERM then SIGKILL), then removes
  the group: no task, group or process is left. ``release`` removes the group too.

The worker is the Ray driver (``ray.init`` at its first job): should it die, Ray ends its tasks
and groups, and the job's heartbeat goes stale as with ``local``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray
from celery import Celery
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from sqlalchemy import func, select

from gradacc.db import session_scope
from gradacc.executors.protocol import Admission, Execution, JobShape, Placement
from gradacc.executors.ray_cluster import bootstrap_address, device_resource, live_nodes
from gradacc.jobs.records import add_event
from gradacc.jobs.restarts import EVENT as RESTARTED
from gradacc.jobs.restarts import restart_or_fail
from gradacc.jobs.states import requeue_job, update_running_job
from gradacc.scheduling.queue import send_or_leave
from gradacc.settings import Settings
from gradacc.tables import Job, JobEvent, JobStatus, utcnow
from trainer_core.spec.outputs import PREEMPT_FILE, TRAIN_LOG
from worker import exit_codes
from worker.consumer.executors.node_env import node_environment, remove_secrets, write_secrets
from worker.consumer.executors.ray_node import node_address, run_node

log = logging.getLogger(__name__)

POLL_S = 1.0  # how often a waiting admission looks at its job (a cancel) and beats
NODES_AFTER_NODE0_S = 10.0  # node 0 ended: the other nodes' ranks end with it, or are stopped


def executor(settings: Settings, app: Celery) -> RayExecutor:
    return RayExecutor(settings, app)


def connect(settings: Settings) -> None:
    """This worker becomes a driver of the cluster, once. ``ray.init`` sets its own SIGTERM
    handler (exit at once): Celery's, the warm shutdown that preempts the job, is put back. It
    also enables ``faulthandler`` on ``sys.stderr``, which Celery replaced by a logging proxy
    without a file descriptor: the process's own streams stand in while it starts."""
    if ray.is_initialized():
        return
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with _real_streams():
        _init(settings)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


@contextmanager
def _real_streams() -> Iterator[None]:
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    try:
        yield
    finally:
        sys.stdout, sys.stderr = streams


def _init(settings: Settings) -> None:
    ray.init(
        address=bootstrap_address(settings),
        namespace="gradacc",
        log_to_driver=False,
        logging_level=logging.WARNING,
        configure_logging=False,
    )


class RayExecutor:
    name = "ray"

    def __init__(self, settings: Settings, app: Celery) -> None:
        self.settings = settings
        self.app = app
        self._groups: dict[str, PlacementGroup] = {}

    def admit(self, job: JobShape, *, worker: str) -> Admission:
        connect(self.settings)
        resource = device_resource(live_nodes(self.settings))
        bundles = [{resource: float(job.processes_per_machine)}] * job.num_machines
        group = placement_group(
            bundles, strategy="STRICT_SPREAD", name=f"gradacc-{job.id}-{job.attempts}"
        )
        waited = self._wait_ready(group, job_id=job.id, worker=worker)
        if waited != "ready":
            remove_placement_group(group)
            if waited == "late":
                self._requeue(job, worker=worker)
            return Admission(None, f"placement group {waited}")
        self._groups[job.id] = group
        host, port = ray.get(
            node_address.options(num_cpus=0, scheduling_strategy=_bundle(group, 0)).remote()
        )
        nodes = ray.util.placement_group_table(group)["bundles_to_node_id"]
        machines = tuple(str(nodes[index]) for index in range(job.num_machines))
        rendezvous = f"{host}:{port}" if job.num_machines > 1 else None
        placement = Placement(
            job.id, job.num_machines, job.processes_per_machine, rendezvous, machines
        )
        log.info("job %s: placed on Ray nodes %s (rendezvous %s)", job.id, machines, rendezvous)
        return Admission(placement)

    def _wait_ready(self, group: PlacementGroup, *, job_id: str, worker: str) -> str:
        """ "ready"; "late" past the wait; "gone" once the job is not this worker's running job."""
        ends = time.monotonic() + self.settings.gang_wait_s
        ready = group.ready()
        while time.monotonic() < ends:
            done, _ = ray.wait([ready], timeout=POLL_S)
            if done:
                return "ready"
            with session_scope(self.settings) as session:
                job = session.get(Job, job_id)
                if job is None or job.status != JobStatus.RUNNING or job.worker != worker:
                    return "gone"
                update_running_job(session, job_id=job_id, heartbeat_at=utcnow())
                session.commit()
        return "late"

    def _requeue(self, job: JobShape, *, worker: str) -> None:
        wait = f"{self.settings.gang_wait_s:g} s"
        message = f"the Ray cluster did not place its {job.num_machines} nodes within {wait}"
        with session_scope(self.settings) as session:
            queued = requeue_job(
                session,
                job_id=job.id,
                worker=worker,
                attempts=Job.attempts - 1,
                released_at=utcnow(),
            )
            if queued:
                add_event(session, job_id=job.id, kind="placement_waiting", message=message)
            session.commit()
        if queued:
            send_or_leave(self.app, self.settings, job.id)

    def start(self, placement: Placement, *, log_path: Path) -> Execution:
        group = self._groups[placement.job_id]
        # The bundle whole: its GPUs (and no CPU: Ray's default of 1 would be asked on top), or
        # its CPUs.
        per_node = placement.processes_per_machine
        gpus = "GPU" in group.bundle_specs[0]
        asks = {"num_gpus": per_node, "num_cpus": 0} if gpus else {"num_cpus": per_node}
        logs = [
            log_path,
            *(
                log_path.with_name(f"{TRAIN_LOG}.ray-node{n}")
                for n in range(1, placement.num_machines)
            ),
        ]
        env = node_environment(self.settings, dict(os.environ))
        secrets = write_secrets(self.settings.jobs_dir / placement.job_id, env.secrets)
        refs = [
            run_node.options(scheduling_strategy=_bundle(group, node), **asks).remote(
                placement.job_id,
                node,
                placement.num_machines,
                placement.rendezvous or "-",
                str(logs[node]),
                self.settings.kill_grace_s,
                env.plain,
                str(secrets),
            )
            for node in range(placement.num_machines)
        ]
        return RayExecution(self.settings, placement.job_id, group, refs, logs)

    def release(self, placement: Placement, *, worker: str) -> None:
        remove_secrets(self.settings.jobs_dir / placement.job_id)
        group = self._groups.pop(placement.job_id, None)
        if group is not None:
            remove_placement_group(group)


def _bundle(group: PlacementGroup, index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)


def restarts_recorded(settings: Settings, job_id: str) -> int:
    with session_scope(settings) as session:
        query = select(func.count()).where(JobEvent.job_id == job_id, JobEvent.kind == RESTARTED)
        return int(session.scalar(query) or 0)


class RayExecution:
    """The job's node tasks, as one process to wait for, preempt and stop."""

    pid: int | None = None  # none of it runs on the worker's machine

    def __init__(
        self,
        settings: Settings,
        job_id: str,
        group: PlacementGroup,
        refs: list[Any],
        logs: list[Path],
    ) -> None:
        self.settings = settings
        self.job_id = job_id
        self.group = group
        self.refs = refs
        self._logs = logs
        self._pending = list(refs)
        self._codes: dict[int, int] = {}
        self._lost: list[str] = []  # nodes whose task failed through Ray (the node died...)
        self._removed = False
        self._stopped = False
        self._node0_ended_at: float | None = None
        self._restarts_before = restarts_recorded(settings, job_id)
        self._code: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self._code is not None:
            return self._code
        ends = None if timeout is None else time.monotonic() + timeout
        while self._pending:
            left = POLL_S if ends is None else min(POLL_S, max(0.0, ends - time.monotonic()))
            done, self._pending = ray.wait(self._pending, num_returns=1, timeout=left)
            for ref in done:
                self._collect(ref)
            self._end_stragglers()
            if not done and ends is not None and time.monotonic() >= ends:
                raise subprocess.TimeoutExpired(f"Ray job {self.job_id}", timeout or 0.0)
        self._code = self._outcome()
        return self._code

    def _collect(self, ref: Any) -> None:
        node = self.refs.index(ref)
        try:
            self._codes[node] = int(ray.get(ref))
        except ray.exceptions.RayError as exc:
            if not self._stopped:
                log.warning("job %s: Ray node task %d failed: %s", self.job_id, node, exc)
                self._lost.append(f"node {node} of {len(self.refs)}: {type(exc).__name__}")
            self._remove_group()  # the other nodes cannot go on without it
        if node == 0:
            self._node0_ended_at = time.monotonic()

    def _end_stragglers(self) -> None:
        ended = self._node0_ended_at
        if ended is not None and self._pending and time.monotonic() - ended > NODES_AFTER_NODE0_S:
            self._remove_group()

    def _remove_group(self) -> None:
        if not self._removed:
            self._removed = True
            remove_placement_group(self.group)

    def _outcome(self) -> int:
        """Node 0's status; after a lost node, a restart recorded (once) and ``RESTART``."""
        node0 = self._codes.get(0)
        if self._stopped or not self._lost or node0 not in (None, exit_codes.CRASHED):
            return node0 if node0 is not None else -signal.SIGKILL
        if restarts_recorded(self.settings, self.job_id) > self._restarts_before:
            return exit_codes.RESTART  # node 0 saw a rank die and recorded it already
        cause = "a Ray node of the job died (" + "; ".join(self._lost) + ")"
        if restart_or_fail(self.settings, self.job_id, cause=cause):
            return exit_codes.RESTART
        return exit_codes.OUTCOME_RECORDED

    def preempt(self) -> None:
        """Rank 0 reads the request between micro-steps (the shared job directory)."""
        (self.settings.jobs_dir / self.job_id / PREEMPT_FILE).touch()

    def stop(self, grace_s: float) -> None:
        self._stopped = True
        for ref in self._pending:
            ray.cancel(ref)  # KeyboardInterrupt in the task: it ends its node's session
        if self._pending:
            ray.wait(self._pending, num_returns=len(self._pending), timeout=grace_s + 5.0)
        self._remove_group()
        self.wait()

    def logs(self) -> list[Path]:
        return list(self._logs)
