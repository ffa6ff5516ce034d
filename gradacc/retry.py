"""Retry with exponential backoff: the one way the service waits out a database blip."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass
class Backoff:
    """Delays that double from ``first`` up to ``cap``; ``reset`` after a success."""

    first: float = 0.5
    cap: float = 10.0
    failures: int = 0

    def next_delay(self) -> float:
        delay: float = min(self.cap, self.first * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0


def retry(
    call: Callable[[], T],
    *,
    errors: tuple[type[BaseException], ...],
    timeout_s: float,
    backoff: Backoff | None = None,
) -> T:
    """``call()`` until it raises none of ``errors``; past ``timeout_s`` the last error is raised."""
    backoff = backoff or Backoff()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except errors:
            if time.monotonic() >= deadline:
                raise
            time.sleep(backoff.next_delay())
