"""A training process forked through the fork server watches the worker that launched it, not
only its parent (the server, which may outlive the worker for a while)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import wait_until
from worker.child.stop import process_alive


def test_a_running_process_is_alive_and_a_dead_or_unreaped_one_is_not() -> None:
    assert process_alive(os.getpid())
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_alive(sleeper.pid)
        sleeper.kill()
        # Killed but not yet waited for: a zombie, which still answers kill(pid, 0).
        wait_until(lambda: not process_alive(sleeper.pid), timeout=10, what="the kill", every=0.05)
        os.kill(sleeper.pid, 0)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not process_alive(sleeper.pid)  # reaped: no such process
