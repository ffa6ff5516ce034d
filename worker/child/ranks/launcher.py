"""A multi-process job: the training process becomes the launcher of its ranks.

``torchrun --standalone --nproc_per_node N -m worker.child.ranks.main JOB_ID`` (``torch.distributed.run``,
gloo on CPUs, NCCL on GPUs) starts N rank processes; rank 0 reports to the database as a
one-process job does (``worker.child.ranks.main``), the others only train. What the worker does to the
training process reaches every rank:

- cancel: the worker signals this process's group, which holds torchrun; torchrun ends its ranks
  (SIGTERM, then SIGKILL), and should torchrun be killed first, its ranks die with it
  (``PR_SET_PDEATHSIG``, set in each rank, and here for torchrun).
- preemption (SIGUSR1, or the worker died and this process was re-parented): this process writes
  ``PREEMPT_FILE``; rank 0 reads it between micro-steps, and the ranks agree to checkpoint at the
  same window's end (``trainer_core.distributed.agree_on_stop``).
- a rank that died (kill -9, the OOM killer, a crash): torchrun stops the others, and every rank
  starts again from the last checkpoint, up to the spec's ``max_restarts`` (``gradacc.jobs.restarts``;
  ``worker.child.ranks.agent`` says which rank failed and how);
- a rank that ran out of memory: every rank starts again at half the micro-batch and twice K
  (``trainer_core.spec.replan``), not counted as a restart.

Its exit status is rank 0's (``RANK0_EXIT_FILE``), or torchrun's when rank 0 left none. A job over
several machines runs one such launcher per machine (``Rendezvous``), all in the one shared job
directory: rank 0's exit file is read by each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from gradacc.db import get_engine, session_scope
from gradacc.jobs.records import add_event
from gradacc.jobs.restarts import restart_or_fail, resume_point
from gradacc.jobs.states import fail_job
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus
from trainer_core.spec import replan
from trainer_core.spec.outputs import PREEMPT_FILE, RANK0_EXIT_FILE
from worker import exit_codes
from worker.child.ranks.fork_popen import ForkedPopen, default_signals
from worker.child.ranks.fork_popen import die_with_parent as die_with_parent  # predict_process
from worker.child.ranks.proc_title import env_room, fits, show_as

FAILURES_FILE = "rank_failures.json"  # the ranks that failed in torchrun's last run
GANG_FAILURES_WAIT_S = 5.0  # node 0 waits this long for the other machines' failures


def rank_error_file(rank: int | str) -> str:
    """Where a rank that raised leaves its error, for the restart's cause."""
    return f"rank{rank}.error"


@dataclass(frozen=True)
class Rendezvous:
    """One node of a job over several machines (``gradacc.scheduling.gang``): torch's c10d rendezvous at
    node 0's ``endpoint`` (host:port), whose agent hosts the store. c10d numbers the nodes itself
    (in the order of their local addresses): the node rank here picks the store's host only."""

    num_machines: int
    node_rank: int
    endpoint: str
    local_addr: str
    join_timeout_s: int = 120

    def arguments(self, job_id: str) -> list[str]:
        is_host = "true" if self.node_rank == 0 else "false"
        return [
            f"--nnodes={self.num_machines}",
            f"--node-rank={self.node_rank}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={self.endpoint}",
            f"--rdzv-id={job_id}",
            f"--rdzv-conf=is_host={is_host},join_timeout={self.join_timeout_s}",
            f"--local-addr={self.local_addr}",
        ]


def torchrun_command(
    job_id: str, num_processes: int, failures: Path, rendezvous: Rendezvous | None = None
) -> list[str]:
    """``num_processes``: this node's ranks (``--standalone`` without a rendezvous)."""
    where = ["--standalone"] if rendezvous is None else rendezvous.arguments(job_id)
    return [
        sys.executable,
        "-m",
        "worker.child.ranks.agent",
        str(failures),
        *where,
        f"--nproc_per_node={num_processes}",
        "-m",
        "worker.child.ranks.main",
        job_id,
    ]


def launch_ranks(
    settings: Settings, job_id: str, num_processes: int, rendezvous: Rendezvous | None = None
) -> int:
    """Run the job's ranks under torchrun until they end, starting them all again after a rank
    died (``gradacc.jobs.restarts``) or ran out of memory (``trainer_core.spec.replan``); the job's
    exit status."""
    job_dir = settings.jobs_dir / job_id
    preempt = job_dir / PREEMPT_FILE
    preempt.unlink(missing_ok=True)
    signal.signal(signal.SIGUSR1, lambda *_: preempt.touch())
    parent = os.getppid()
    while True:
        returncode, failed = _run_ranks(settings, job_id, num_processes, parent, rendezvous)
        exit_file = job_dir / RANK0_EXIT_FILE
        if exit_file.is_file():
            return int(exit_file.read_text())
        print(f"torchrun exited with status {returncode} before rank 0 recorded an outcome")
        if os.getppid() != parent or not failed:
            return returncode or exit_codes.CRASHED  # the worker died, or torchrun itself did
        if rendezvous is not None:
            return _gang_failed(settings, job_id, failed, num_processes, rendezvous)
        if not _start_again(settings, job_id, failed, num_processes):
            return (
                exit_codes.OUTCOME_RECORDED if _recorded(settings, job_id) else exit_codes.CRASHED
            )


def _gang_failed(
    settings: Settings,
    job_id: str,
    failed: list[dict[str, Any]],
    per_node: int,
    rendezvous: Rendezvous,
) -> int:
    """A rank of a job over several machines failed: every node's torchrun stops (the others'
    ranks fail in their next collective). Only node 0 decides, once, with every node's failures
    in hand: a restart (or a re-plan) hands the job on through the queue (``RESTART``), and the
    next node 0 gathers a gang again (on the devices it can get) and resumes from the last
    checkpoint; past ``max_restarts`` the job fails. The other nodes just end."""
    if rendezvous.node_rank != 0:
        return exit_codes.CRASHED
    job_dir = settings.jobs_dir / job_id
    failed = _every_node(job_dir, failed, rendezvous.num_machines)
    world = per_node * rendezvous.num_machines
    if _start_again(settings, job_id, failed, world):
        return exit_codes.RESTART
    return exit_codes.OUTCOME_RECORDED if _recorded(settings, job_id) else exit_codes.CRASHED


def _every_node(job_dir: Path, own: list[dict[str, Any]], nodes: int) -> list[dict[str, Any]]:
    """Node 0's failures and the other nodes' (their agents write them to the shared job
    directory as they stop: waited for up to ``GANG_FAILURES_WAIT_S``; a node whose machine is
    gone writes none)."""
    deadline = time.monotonic() + GANG_FAILURES_WAIT_S
    others = [job_dir / failures_file(node) for node in range(1, nodes)]
    while not all(path.is_file() for path in others) and time.monotonic() < deadline:
        time.sleep(0.1)
    found = list(own)
    for path in others:
        if path.is_file():
            found += json.loads(path.read_text())
    return sorted(found, key=lambda f: int(f["rank"]))


def failures_file(node_rank: int | None) -> str:
    """Each machine's agent writes its own (they share the job directory)."""
    return FAILURES_FILE if node_rank is None else f"rank_failures.node{node_rank}.json"


def _run_ranks(
    settings: Settings, job_id: str, num_processes: int, parent: int, rendezvous: Rendezvous | None
) -> tuple[int, list[dict[str, Any]]]:
    """One run of torchrun: its exit status, and the ranks that failed (``rank_agent``)."""
    job_dir = settings.jobs_dir / job_id
    failures = job_dir / failures_file(None if rendezvous is None else rendezvous.node_rank)
    for path in (failures, job_dir / RANK0_EXIT_FILE, *job_dir.glob(rank_error_file("*"))):
        path.unlink(missing_ok=True)
    preempt = job_dir / PREEMPT_FILE
    command = torchrun_command(job_id, num_processes, failures, rendezvous)
    agent = _start_agent(command, settings.resolved_database_url())
    while True:
        try:
            returncode = agent.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent and not preempt.exists():
                preempt.touch()  # the worker died: checkpoint and stop, another one resumes
    failed = json.loads(failures.read_text()) if failures.is_file() else []
    return returncode, failed


def _start_agent(command: list[str], database_url: str) -> subprocess.Popen[bytes]:
    """torchrun's agent, forked from this process when it is warm (forked from the worker's fork
    server: torch, transformers and the core imported) and ``/proc`` can show the agent's command
    whole; else started cold (``python -m worker.child.entry``: a fork would import as much)."""
    if "torch" not in sys.modules or not fits(command):
        # The room last: each forked rank writes its own variables there for /proc (proc_title).
        env = {**os.environ, **env_room()}
        return subprocess.Popen(command, preexec_fn=die_with_parent, env=env)
    get_engine(database_url).dispose()  # no pooled connection shared with the agent's processes
    return ForkedPopen(command, partial(_agent, command), new_session=False)


def _agent(command: list[str]) -> int:
    """The forked agent: what an exec'd one would have been (``fork_popen``). Its ranks write
    their variables in the room the worker's fork server has (``proc_title.room_in_environment``)."""
    die_with_parent()
    default_signals()
    show_as(command, {})
    from worker.child.ranks import agent  # torch.distributed.run: torch is imported already

    sys.argv = [agent.__file__ or "agent", *command[3:]]
    return agent.main(command[3:])


def _start_again(
    settings: Settings, job_id: str, failed: list[dict[str, Any]], num_processes: int
) -> bool:
    """Whether to start every rank again: a re-plan after running out of memory, or a restart
    within ``max_restarts``. Records the event (or the failure) either way."""
    job_dir = settings.jobs_dir / job_id
    if any(f["exitcode"] == exit_codes.REPLAN for f in failed):
        return _replanned(settings, job_id, job_dir)
    cause = ", ".join(_describe(f, num_processes, job_dir) for f in _root_causes(failed))
    return restart_or_fail(settings, job_id, cause=cause)


def _replanned(settings: Settings, job_id: str, job_dir: Path) -> bool:
    plan = replan.read(job_dir)
    with session_scope(settings) as session:
        if plan is None or plan.exhausted is not None:
            message = plan.exhausted if plan else "out of memory in a rank; no re-plan was written"
            fail_job(session, job_id=job_id, code="out_of_memory", message=str(message))
            session.commit()
            return False
        message = (
            f"a rank ran out of memory at micro-batch {plan.tried[-2]}: every rank starts again "
            f"at micro-batch {plan.micro_batch_size} x K {plan.accumulation}; "
            f"{resume_point(job_dir)}"
        )
        add_event(session, job_id=job_id, kind="replanned", message=message)
        session.commit()
    return True


def _root_causes(failed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ranks that failed first: one killed by a signal (kill -9, the OOM killer) makes the
    others fail in their next collective (status 1), and torchrun stops the rest (SIGTERM)."""
    signalled = [f for f in failed if f.get("signal") not in (None, "SIGTERM")]
    exited = [f for f in failed if f.get("signal") is None]
    return signalled or exited or failed


def _describe(failure: dict[str, Any], num_processes: int, job_dir: Path) -> str:
    rank = f"rank {failure['rank']} of {num_processes}"
    if failure.get("signal"):
        return f"{rank} killed by {failure['signal']}"
    error = job_dir / rank_error_file(failure["rank"])
    detail = f" ({error.read_text().strip()[:300]})" if error.is_file() else ""
    return f"{rank} exited with status {failure['exitcode']}{detail}"


def _recorded(settings: Settings, job_id: str) -> bool:
    """The job's outcome is in the database (failed past its restarts, or cancelled)."""
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        return job is None or job.status != JobStatus.RUNNING
