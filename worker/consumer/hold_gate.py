"""A test failpoint the runners share: ``held(env, n)`` is true while the file the environment
variable ``env`` names exists and holds a number below ``n``, so the n-th line or item waits."""

from __future__ import annotations

import os
from pathlib import Path


def held(env: str, number: int) -> bool:
    gate = os.environ.get(env)
    try:
        return bool(gate) and number > int(Path(str(gate)).read_text().strip() or 0)
    except (OSError, ValueError):
        return False
