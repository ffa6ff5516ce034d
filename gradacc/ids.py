"""Time-ordered ids: a prefix, 12 hex digits of milliseconds, 8 random hex digits. Sorting them
sorts by creation time, which the lists page by (``job_``, ``file-``, ``pred_``)."""

from __future__ import annotations

import re
import secrets
import time


def time_ordered_id(prefix: str) -> str:
    return f"{prefix}{int(time.time() * 1000):012x}{secrets.token_hex(4)}"


def id_pattern(prefix: str) -> str:
    """The regular expression of an id made by ``time_ordered_id(prefix)``."""
    return rf"^{re.escape(prefix)}[0-9a-f]{{20}}$"
