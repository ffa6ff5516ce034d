from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import multiprocessing.util
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def _forked_children_leave_broker_sockets_alone() -> Iterator[None]:
    """Service tests earlier in this pytest process leave kombu connection pools open (the API's
    Celery app, a capacity broadcast waiting on Redis), and kombu registers an after-fork hook that
    closes them in every forked child: a DataLoader worker forked by a core test then closes a
    Redis channel in the middle of a BRPOP and blocks reading the parent's socket. A training
    process never holds such pools (it does not import Celery); here the hooks are dropped so that
    forked children leave the inherited sockets alone."""
    registry = multiprocessing.util._afterfork_registry  # type: ignore[attr-defined]
    for key in list(registry):
        if getattr(key[2], "__module__", "") == "kombu.resource":
            registry.pop(key, None)
    yield
