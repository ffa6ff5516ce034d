"""A port for a c10d store that is free now and stays free until torchrun binds it.

A port the kernel hands out for ``bind(("", 0))`` comes from the ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), the same range every outgoing connection of the
machine takes its local port from. Between the pick and torchrun's bind, seconds later (a gang
waits for its machines), any HTTP, database or broker connection may take it: the store then fails
with ``EADDRINUSE`` and the job with it (seen once in a whole test run, on a gang's restart). A
port below that range is never handed out implicitly, so only another explicit bind can take it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10000  # below the registered services most machines run
TRIES = 200


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for implicitly bound ports (Linux's default where it cannot be read)."""
    try:
        low, high = (int(part) for part in RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def store_port() -> int:
    """A port free on this machine now, outside the ephemeral range where there is room below it
    (else one the kernel picks)."""
    low, _ = ephemeral_range()
    candidates = random.sample(range(LOWEST, low), min(TRIES, max(0, low - LOWEST)))
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])
