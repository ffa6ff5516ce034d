"""Start this worker's predict server (``python -m worker.predict``) when the worker is ready, stop
it at its shutdown. Its output joins the worker's."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from gradacc.settings import Settings
from worker.child.ranks.launcher import die_with_parent
from worker.consumer.supervisor import worker_name

log = logging.getLogger(__name__)
_process: subprocess.Popen[bytes] | None = None


def start(settings: Settings) -> None:
    global _process
    if not settings.predict_server or _process is not None:
        return
    env = {**os.environ, "GRADACC_PREDICT_WORKER": worker_name()}
    # Dies with the worker (a kill -9 leaves no server polling behind; it also checks its parent).
    command = [sys.executable, "-m", "worker.predict"]
    _process = subprocess.Popen(command, env=env, preexec_fn=die_with_parent)
    log.info("predict server started (pid %d)", _process.pid)


def stop() -> None:
    global _process
    if _process is None:
        return
    _process.terminate()
    try:
        _process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _process.kill()
    _process = None
