"""What each worker's fork server imports once (``forkserver.set_forkserver_preload``): every job
forked from it starts with torch, transformers and the core already imported and warmed up.

The warm-up never touches CUDA, and runs in the server's own mode (``modes``: one thread, low
priority), which each forked job leaves again.
"""

from __future__ import annotations

import atexit
import os

import worker.fork_server.child  # noqa: F401  (what a forked job unpickles: already imported)
from worker.child.ranks.proc_title import ENV_ROOM
from worker.fork_server.modes import enter_server_mode
from worker.fork_server.warmup import warm_up

os.environ.pop(ENV_ROOM, None)  # room in /proc for a job's forked ranks, never a variable of ours
enter_server_mode()
warm_up()
# The server exits when its worker is gone (its "alive" pipe closes). Tearing down torch and
# transformers at nice 10 on a busy machine took it over 20 s, while it kept its orphaned job as a
# child (not re-parented, so the job trained on without a worker): leave at once instead. Run
# last-registered-first, before any other exit handler; forked jobs end with os._exit, never here.
atexit.register(os._exit, 0)
