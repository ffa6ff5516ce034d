"""What each worker's fork server imports once (``forkserver.set_forkserver_preload``): every job
forked from it starts with torch, transformers and the core already imported and warmed up.

The warm-up never touches CUDA, and runs in the server's own mode (``modes``: one thread, low
priority), which each forked job leaves again.
"""

from __future__ import annotations

import worker.fork_server.child  # noqa: F401  (what a forked job unpickles: already imported)
from trainer_core.warmup import warm_up
from worker.fork_server.modes import enter_server_mode

enter_server_mode()
warm_up()
