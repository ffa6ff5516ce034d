"""The order test files are handed to the suite's processes: the costliest first.

``make test`` runs three processes (on two cores: the third fills the time the others wait on
servers and workers) with ``--dist loadfile``: xdist hands out whole files, one at a
time, to whichever process asks next. Left to itself it sorts the files by their number of tests
(``--loadscope-reorder``, its default), which puts the one-test end-to-end files (a torchrun gang,
a kill -9 and its resume: minutes each) last, so that one process still runs them long after the
other has run out of work. Handed out costliest first, the last files are the quick ones and the
processes finish together.

``COST_S`` is what each file cost alone (the larger of its CPU seconds, those of pytest and of
every process it started, and its wall time; docs/testing.md, "Where the time goes"). A file not listed is put among the
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

# Seconds each file took alone, the larger of its CPU (user + system of pytest and of every
# process it started: a cgroup's count) and its wall time, so that a file that mostly waits (a
# fuzzer on a live server) goes early too. Measured 2026-12-02 (second pass, docs/testing.md,
# "Per file, alone, after the third pass"), the e2e files two at a time (``-n 2``).
COST_S: dict[str, float] = {
    "tests/e2e/test_gang_lost_node.py": 73,
    # A real Ray cluster (head + 2 nodes), 2 W=2 Ray jobs (one losing a raylet) and a local gang,
    # the one-process reference trained in the test process; make test's three tests, 2 epochs a
    # job: 121 s of CPU, 84 s of wall, alone (2026-12-05; the heavy ones left out)
    "tests/e2e/test_ray_executor.py": 133,
    "tests/e2e/test_contract_fuzz.py": 43,
    # A live serve with its predict server, the stock tinker SDK and tinker-cookbook's four loops,
    # a Tinker host killed, a job turned away and run (2026-12-05: 63 s wall, alone)
    "tests/e2e/test_tinker.py": 80,
    "tests/e2e/test_openai_sdk.py": 41,
    # A live serve, one reinforcement job (2 steps, 5 python graders per answer, 1 s CPU limit):
    # wall 34-39 s, rusage CPU 17-21 s, niced, alone (2026-12-02)
    "tests/e2e/test_openai_reinforcement.py": 38,
    # A live serve, an SFT judge and a reinforcement job it grades: wall 34 s, CPU 25 s (2026-12-05)
    "tests/e2e/test_own_model_graders.py": 36,
    "tests/e2e/test_file_import_training.py": 25,
    "tests/e2e/test_shared_lora_bases.py": 39,  # alone, cgroup CPU 38.7 s, wall 38.0 s
    "tests/e2e/test_concurrent_posts.py": 36,
    "tests/e2e/test_scheduling.py": 36,
    "tests/e2e/test_pg_redis.py": 33,
    # + responses, aliases, uploaded and hub models (issue 52): ~55 s on a slow day (2026-12-05)
    "tests/e2e/test_chat_completions.py": 125,
    # Two workers on PostgreSQL + Redis, a 200-line batch and its 198 live references: 85 s
    "tests/e2e/test_batches.py": 115,
    "tests/e2e/test_client_cli.py": 28,
    "tests/e2e/test_predict.py": 26,
    "tests/e2e/test_gang.py": 26,
    "tests/e2e/test_dashboard_reports.py": 25,
    "tests/e2e/test_multi_process.py": 25,
    "tests/e2e/test_gang_faults.py": 25,
    "tests/e2e/test_embedded.py": 25,
    "tests/e2e/test_round_trip.py": 24,
    # a production serve, SIGTERM, a restart forked from the zygote: CPU 32 s, wall 33 s (2026-12-05)
    "tests/e2e/test_serve_signals.py": 33,
    "tests/e2e/test_child_kill.py": 21,
    "tests/e2e/test_delete_race.py": 20,
    "tests/trainer_core/test_distributed.py": 18,
    # One torchrun of 16 sharded jobs, 8 one-process references, a kill -9 and two resumes:
    # alone, CPU 58 s, wall 57 s (2026-12-05; trajectories of 21 rows)
    "tests/trainer_core/test_sharded.py": 58,
    "tests/trainer_core/test_qlora.py": 9,  # three 4-bit runs and a resume: alone, wall 9 s
    "tests/e2e/test_dashboard_control.py": 18,
    "tests/e2e/test_lora_model.py": 17,
    "tests/trainer_core/test_crash.py": 4,  # the killed run and its resume forked: CPU 3.5 s
    "tests/e2e/test_openai_whole_rows.py": 13,
    "tests/trainer_core/test_grpo_run.py": 21,  # alone, CPU 20.8 s (a torchrun of 2 ranks), wall 20.5 s
    "tests/e2e/test_job_limits.py": 14,
    "tests/e2e/test_grpo_job.py": 14,  # alone: wall 14.1 s, CPU 7.7 s (a worker, two grpo jobs)
    "tests/e2e/test_dashboard.py": 18,  # +6 s: the What-is-trained view (one preview child)
    "tests/trainer_core/test_cli.py": 10,
    "tests/trainer_core/test_chat_equivalence.py": 12,
    "tests/trainer_core/test_grpo_exactness.py": 12,
    "tests/e2e/test_tenants_worker.py": 11,
    "tests/trainer_core/test_dpo_exactness.py": 11,
    "tests/trainer_core/test_dpo_distributed.py": 11,
    "tests/worker/test_process_layout.py": 11,
    "tests/api/test_fuzz_jobs.py": 11,
    "tests/trainer_core/test_training_options.py": 10,
    "tests/e2e/test_rank_restarts.py": 10,
    "tests/e2e/test_redis_restart.py": 10,
    "tests/api/test_webhook_deadline.py": 9,
    "tests/e2e/test_stream.py": 9,
    "tests/e2e/test_webhooks_worker.py": 9,
    # GRPO metrics and evaluation: alone, rusage CPU 8.4 s and 10.3 s, ~8 s of each the start
    # (imports, conftest); one 4-window run, and a run whose python grader spins 1 s CPU
    "tests/trainer_core/test_grpo_metrics.py": 9,
    "tests/gradacc/test_grader_reward.py": 10,
    "tests/trainer_core/test_selection.py": 3,
    "tests/trainer_core/test_save_policy.py": 9,  # three kills, forked (forked_cli): CPU 9.2 s
    "tests/trainer_core/test_async_checkpoint.py": 6,  # the stalled writer forked: CPU 5-5.6 s
    "tests/worker/test_forked_ranks.py": 8,
    "tests/trainer_core/test_hub_cache.py": 8,
    "tests/trainer_core/test_grpo_distributed.py": 8,
    "tests/trainer_core/test_run.py": 7,
    "tests/trainer_core/test_lora.py": 7,
    "tests/api/test_upload_bombs.py": 7,
    "tests/api/test_openai_reinforcement.py": 6,  # alone: wall 5.8 s, CPU 5.7 s (1.3 s of tests)
    "tests/api/test_webhooks.py": 7,
    "tests/test_schedule.py": 6,
    "tests/trainer_core/test_equivalence.py": 6,
    "tests/trainer_core/test_dpo_tokens.py": 6,
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
