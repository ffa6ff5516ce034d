"""Start this worker's predict server (``python -m worker.predict``) when the worker is ready, keep
it running (a server that dies, killed or out of memory, is started again, after a pause that
doubles while it keeps dying; one that stopped when told to is not), stop it at the worker's shutdown. Its output joins the worker's."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

from gradacc.retry import Backoff
from gradacc.settings import Settings
from worker.child.ranks.launcher import die_with_parent
from worker.consumer.supervisor import worker_name

log = logging.getLogger(__name__)
# How a server that was told to stop ends (by its worker, or by a signal to the whole group at
# shutdown, before the worker's own stop): not restarted. SIGKILL, a crash: restarted.
STOPPED = (0, -signal.SIGTERM, -signal.SIGINT)
STABLE_S = 60.0  # a server that ran this long before dying is restarted after the first pause
_process: subprocess.Popen[bytes] | None = None
_lock = threading.Lock()  # between the supervisor's restart and stop()
_stopping = threading.Event()
_supervisor: threading.Thread | None = None


def start(settings: Settings) -> None:
    global _supervisor
    if not settings.predict_server or _supervisor is not None:
        return
    _stopping.clear()
    process = _spawn()
    _supervisor = threading.Thread(
        target=_supervise, args=(process,), name="predict-supervisor", daemon=True
    )
    _supervisor.start()


def _spawn() -> subprocess.Popen[bytes]:
    global _process
    env = {**os.environ, "GRADACC_PREDICT_WORKER": worker_name()}
    # Dies with the worker (a kill -9 leaves no server polling behind; it also checks its parent).
    command = [sys.executable, "-m", "worker.predict"]
    _process = subprocess.Popen(command, env=env, preexec_fn=die_with_parent)
    log.info("predict server started (pid %d)", _process.pid)
    return _process


def _supervise(process: subprocess.Popen[bytes]) -> None:
    backoff = Backoff(first=1.0, cap=30.0)
    while True:
        started = time.monotonic()
        code = process.wait()
        if _stopping.is_set() or code in STOPPED:
            return
        if time.monotonic() - started > STABLE_S:
            backoff.reset()
        delay = backoff.next_delay()
        log.warning(
            "predict server (pid %d) exited with %s; starting another in %.0f s",
            process.pid,
            code,
            delay,
        )
        if _stopping.wait(delay):
            return
        with _lock:
            if _stopping.is_set():
                return
            process = _spawn()


def stop() -> None:
    global _process, _supervisor
    _stopping.set()
    with _lock:
        process, _process = _process, None
    _supervisor = None
    if process is None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
