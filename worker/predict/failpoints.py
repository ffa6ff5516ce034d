"""Test-only switches of the predict server (as ``trainer_core.testing.failpoints`` for
training). Never set them in production.

``GRADACC_FAILPOINT_SERVE_HOLD=PATH``: a streamed generation parks at each token while the file
PATH exists, unless its client has gone away. A test that must act on a running stream (close it
mid-way) holds it there instead of racing a tiny model's speed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

SERVE_HOLD = "GRADACC_FAILPOINT_SERVE_HOLD"
POLL_S = 0.05


def hold_stream(gone: Callable[[], bool]) -> None:
    gate = os.environ.get(SERVE_HOLD)
    while gate and Path(gate).exists() and not gone():
        time.sleep(POLL_S)
