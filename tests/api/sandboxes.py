"""What the grader tests share: a real API server on the embedded stack with API keys, the python
graders that attack it, and the sandboxes it runs, found among this process's descendants (the
server runs in a thread of the test process)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from api.main import create_app
from gradacc.auth import create_api_key
from gradacc.db import get_engine, session_scope
from gradacc.settings import Settings
from tests.conftest import sqlite_file
from tests.support import served_in_thread

KEEPER = "_sandbox_child.py"  # the sandbox's processes' command line


@dataclass(frozen=True)
class Server:
    url: str
    keys: dict[str, str]
    settings: Settings

    def headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}


@contextmanager
def grader_server(home: Path, migrated: Path, **update: Any) -> Iterator[Server]:
    """``gradacc``'s API with keys for alice, bob and carol, and ``update``'s settings."""
    settings = Settings(home=home, require_auth=True, **update)
    home.mkdir(parents=True)
    shutil.copyfile(migrated, sqlite_file(settings))
    with session_scope(settings) as session:
        keys = {t: create_api_key(session, tenant=t) for t in ("alice", "bob", "carol")}
    try:
        with served_in_thread(create_app(settings)) as url:
            yield Server(url, keys, settings)
    finally:
        get_engine(settings.resolved_database_url()).dispose()


def python_grader(body: str) -> dict[str, Any]:
    source = "import os, time\n\ndef grade(sample, item):\n" + body
    return {"type": "python", "name": "py", "source": source}


def sleeping(seconds: float) -> dict[str, Any]:
    return python_grader(f"    time.sleep({seconds})\n    return 1\n")


def sandboxes() -> list[psutil.Process]:
    """The sandboxes' processes (keepers, graders and what they forked) running now."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any(KEEPER in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:  # gone meanwhile
            continue
    return found


def keepers() -> int:
    """How many sandboxes run: their keepers, each the child of its ``unshare``."""
    count = 0
    for process in sandboxes():
        try:
            parent = process.parent()
            count += parent is not None and parent.name() == "unshare"
        except psutil.Error:
            continue
    return count


class PeakMemory:
    """The highest resident memory of this process (``of="self"``) or of all its sandboxes
    together (``of="sandboxes"``), sampled every 10 ms while the block runs."""

    def __init__(self, of: str) -> None:
        self.of = of
        self.start = self._now()
        self.peak = self.start
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _now(self) -> int:
        if self.of == "self":
            return int(psutil.Process().memory_info().rss)
        total = 0  # proportional: a library mapped by each process counts once in all
        for process in sandboxes():
            try:
                total += process.memory_full_info().pss
            except psutil.Error:
                continue
        return total

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self._now())
            time.sleep(0.01)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
