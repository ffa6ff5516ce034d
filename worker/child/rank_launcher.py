"""A multi-process job: the training process becomes the launcher of its ranks.

``torchrun --standalone --nproc_per_node N -m worker.child.rank_main JOB_ID`` (``torch.distributed.run``,
gloo on CPUs, NCCL on GPUs) starts N rank processes; rank 0 reports to the database as a
one-process job does (``worker.child.rank_main``), the others only train. What the worker does to the
training process reaches every rank:

- cancel: the worker signals this process's group, which holds torchrun; torchrun ends its ranks
  (SIGTERM, then SIGKILL), and should torchrun be killed first, its ranks die with it
  (``PR_SET_PDEATHSIG``, set in each rank, and here for torchrun).
- preemption (SIGUSR1, or the worker died and this process was re-parented): this process writes
  ``PREEMPT_FILE``; rank 0 reads it between micro-steps, and the ranks agree to checkpoint at the
  same window's end (``trainer_core.distributed.agree_on_stop``).

Its exit status is rank 0's (``RANK0_EXIT_FILE``), or torchrun's when rank 0 left none.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

from worker import exit_codes

PREEMPT_FILE = "preempt.request"
RANK0_EXIT_FILE = "rank0.exit"
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: SIGKILL this process when the process that started it exits, however it exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def torchrun_command(job_id: str, num_processes: int) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={num_processes}", "-m", "worker.child.rank_main", job_id,
    ]  # fmt: skip


def launch_ranks(job_dir: Path, job_id: str, num_processes: int) -> int:
    """Run the job's ranks under torchrun until they end; the job's exit status."""
    for name in (PREEMPT_FILE, RANK0_EXIT_FILE):
        (job_dir / name).unlink(missing_ok=True)
    preempt = job_dir / PREEMPT_FILE
    signal.signal(signal.SIGUSR1, lambda *_: preempt.touch())
    parent = os.getppid()
    agent = subprocess.Popen(torchrun_command(job_id, num_processes), preexec_fn=die_with_parent)
    while True:
        try:
            returncode = agent.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent and not preempt.exists():
                preempt.touch()  # the worker died: checkpoint and stop, another one resumes
    exit_file = job_dir / RANK0_EXIT_FILE
    if exit_file.is_file():
        return int(exit_file.read_text())
    print(f"torchrun exited with status {returncode} before rank 0 recorded an outcome")
    return returncode or exit_codes.CRASHED
