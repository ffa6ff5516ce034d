"""The order test files are handed to the suite's processes: the costliest first.

``make test`` runs two processes with ``--dist loadfile``: xdist hands out whole files, one at a
time, to whichever process asks next. Left to itself it sorts the files by their number of tests
(``--loadscope-reorder``, its default), which puts the one-test end-to-end files (a torchrun gang,
a kill -9 and its resume: minutes each) last, so that one process still runs them long after the
other has run out of work. Handed out costliest first, the last files are the quick ones and the
two processes finish together.

``COST_S`` is what each file cost alone (CPU seconds: user + system of pytest and of every
process it started; docs/testing.md, "Where the time goes"). A file not listed is put among the
files that cost ``UNKNOWN_S``: after every file known to be heavier, before every file known to
be lighter. The order only moves the end of the run: a wrong figure costs time, never a result.

The two hooks below are the suite's (``tests/conftest.py`` imports them);
``tests/test_schedule.py`` runs them under xdist.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

# Seconds each file costs: CPU alone (a cgroup's count, docs/testing.md) for the e2e files
# measured on 2026-12-02 (with the forked torchrun ranks for the gang, multi-process and
# rank-restart files); for the rest, the file's time in the last two-process run.
COST_S: dict[str, float] = {
    "tests/e2e/test_gang_lost_node.py": 108,
    "tests/e2e/test_concurrent_posts.py": 68,
    "tests/e2e/test_pg_redis.py": 59,
    "tests/e2e/test_scheduling.py": 53,
    "tests/e2e/test_contract_fuzz.py": 49,
    "tests/e2e/test_embedded.py": 39,
    "tests/e2e/test_multi_process.py": 37,
    "tests/e2e/test_gang_faults.py": 36,
    "tests/e2e/test_client_cli.py": 36,
    "tests/e2e/test_openai_sdk.py": 35,
    "tests/e2e/test_shared_lora_bases.py": 35,
    "tests/e2e/test_dashboard_reports.py": 35,
    "tests/e2e/test_gang.py": 34,
    "tests/e2e/test_round_trip.py": 34,
    "tests/trainer_core/test_distributed.py": 34,
    "tests/e2e/test_child_kill.py": 33,
    "tests/e2e/test_serve_signals.py": 32,
    "tests/e2e/test_predict.py": 30,
    "tests/trainer_core/test_chat_equivalence.py": 26,
    "tests/trainer_core/test_crash.py": 25,
    "tests/e2e/test_rank_restarts.py": 23,
    "tests/e2e/test_dashboard.py": 21,
    "tests/trainer_core/test_cli.py": 20,
    "tests/e2e/test_tenants_worker.py": 20,
    "tests/e2e/test_delete_race.py": 19,
    "tests/trainer_core/test_training_options.py": 17,
    "tests/trainer_core/test_hub_cache.py": 16,
    "tests/e2e/test_upstream_serving.py": 15,
    "tests/worker/test_process_layout.py": 14,
    "tests/trainer_core/test_equivalence.py": 12,
    "tests/trainer_core/test_lora.py": 12,
    "tests/trainer_core/test_run.py": 11,
    "tests/e2e/test_stream.py": 8,
}

UNKNOWN_S = 15.0  # about what an unmeasured e2e file costs; in-process API files cost less


class Located(Protocol):
    """What the ordering needs of a pytest item: the file it comes from."""

    @property
    def path(self) -> Path: ...


T = TypeVar("T", bound=Located)


def cost_of(path: Path, root: Path) -> float:
    """The file's measured cost, or ``UNKNOWN_S``."""
    try:
        name = path.relative_to(root).as_posix()
    except ValueError:
        return UNKNOWN_S
    return COST_S.get(name, UNKNOWN_S)


def costliest_first(items: Sequence[T], root: Path) -> list[T]:
    """``items`` with their files in decreasing cost. The sort is stable and its key is a file's,
    so each file's tests keep their order and stay together (module fixtures, parameters)."""
    return sorted(items, key=lambda item: -cost_of(item.path, root))


def pytest_configure(config: pytest.Config) -> None:
    # xdist's loadfile hands out files by their number of tests unless told not to (a user's
    # --loadscope-reorder cannot be told from its default: this wins).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The costliest files first: the order in which xdist's loadfile then hands them out."""
    items[:] = costliest_first(items, config.rootpath)
