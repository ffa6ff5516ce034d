"""The training process's stop check: ``should_stop`` for the core, from the job's status, the
worker's preemption signal and the liveness of the worker itself."""

from __future__ import annotations

import os
import signal
import time

from gradacc.db import DATABASE_ERRORS, session_scope
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus
from trainer_core.spec.callbacks import StopRequest
from trainer_core.spec.outputs import PREEMPT_FILE

WORKER_PID_ENV = "GRADACC_WORKER_PID"  # a forked job's worker: the process it must not outlive
STATUS_EVERY_S = 3.0  # the worker enforces a cancel by itself within ~1 s; this is the polite path
PARENT_EVERY_S = 0.5  # a system call, no database


class DatabaseStopCheck:
    """``should_stop`` for the core: "cancel" once the job left "running"; "preempt" when it is
    paused, when the worker shuts down (SIGUSR1) or died (this process was re-parented, or the worker that forked
    it through its fork server is gone). Checks every ``PARENT_EVERY_S`` and reads the database
    every ``STATUS_EVERY_S``; the core calls it between micro-steps."""

    def __init__(self, settings: Settings, job_id: str) -> None:
        self.settings = settings
        self.job_id = job_id
        self.parent = os.getppid()
        self.worker_pid = int(os.environ.get(WORKER_PID_ENV) or 0) or None
        # A multi-process job's launcher asks its rank 0 to preempt here (worker.child.ranks.launcher).
        self.preempt_file = settings.jobs_dir / job_id / PREEMPT_FILE
        self._next_check = 0.0
        self._next_read = 0.0
        self._answer: StopRequest | None = None
        signal.signal(signal.SIGUSR1, self._on_preempt_signal)

    def _on_preempt_signal(self, _signum: int, _frame: object) -> None:
        self._answer = "preempt"  # the worker is shutting down: checkpoint and stop

    def __call__(self) -> StopRequest | None:
        now = time.monotonic()
        if self._answer is not None or now < self._next_check:
            return self._answer
        self._next_check = now + PARENT_EVERY_S
        if self._worker_gone() or self.preempt_file.exists():
            self._answer = "preempt"
            return self._answer
        if now < self._next_read:
            return None
        self._next_read = now + STATUS_EVERY_S
        try:
            with session_scope(self.settings) as session:
                status = session.get(Job, self.job_id)
                if status is not None and status.status == JobStatus.PAUSED:
                    self._answer = "preempt"  # paused: checkpoint at the boundary and stop
                elif status is None or status.status != JobStatus.RUNNING:
                    self._answer = "cancel"
        except DATABASE_ERRORS:
            pass  # the database blipped: keep training, ask again at the next check
        return self._answer

    def _worker_gone(self) -> bool:
        if os.getppid() != self.parent:
            return True
        return self.worker_pid is not None and not process_alive(self.worker_pid)


def process_alive(pid: int) -> bool:
    """Running or sleeping: a zombie (dead, not yet reaped) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel whether the pid exists at all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # another user's: it exists
        return True
