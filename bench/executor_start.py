"""POST -> first step of one job of W=2 over M=2 machines under the ``local`` executor (a gang of
two workers on machines m1 and m2) and under ``ray`` (a head and two one-CPU nodes on this
machine, one worker as the driver), in one run, interleaved; what Ray adds at the start.

Each run is timed from the POST (job ``created_at``) to its ``started`` event (admission: the gang
gathered, or the placement group created and the rendezvous found), its ``training`` event (every
rank up, model and data loaded) and its first optimizer step (the job's ``step`` read at 20 ms).
The first pair (same seed) also gives the same job's final weights under both executors: their
largest difference against the tolerance of the equivalence tests.

PostgreSQL (a fresh database, dropped after) and Redis, as the tests use them. Prints a table;
asserts nothing. Usage: .venv/bin/python bench/executor_start.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import select  # noqa: E402

from api.main import create_app  # noqa: E402
from gradacc.db import session_scope  # noqa: E402
from gradacc.settings import Settings  # noqa: E402
from gradacc.tables import Job, JobEvent  # noqa: E402
from tests.conftest import REDIS_URL, fresh_pg_database, migrate, unique_queue  # noqa: E402
from tests.e2e.conftest import WorkerProcess, forget_queue, settings_env  # noqa: E402
from tests.e2e.ray_cluster import RayCluster  # noqa: E402
from tests.e2e.test_gang import GANG, REFERENCE, registered  # noqa: E402
from tests.support import wait_final  # noqa: E402
from tests.trainer_core.helpers import (  # noqa: E402
    final_weights,
    initial_weights,
    max_abs_diff,
    tolerance,
)
from trainer_core.spec.job import JobSpec  # noqa: E402

MARKS = ("started", "training", "first step", "end")


@dataclass
class Stack:
    name: str
    api: TestClient
    settings: Settings


def timeline(settings: Settings, job_id: str) -> dict[str, float]:
    """Seconds from the POST to each mark, polling the job's step at 20 ms until its end."""
    first_step: float | None = None
    while True:
        with session_scope(settings) as session:
            job = session.get(Job, job_id)
            assert job is not None
            if first_step is None and (job.step or 0) >= 1:
                first_step = time.time()
            if job.status in ("succeeded", "failed", "cancelled"):
                query = select(JobEvent.kind, JobEvent.created_at).where(JobEvent.job_id == job_id)
                events = session.execute(query.order_by(JobEvent.id)).all()
                posted = job.created_at
                ended = job.finished_at or job.updated_at
                assert job.status == "succeeded", (job_id, job.status)
                break
        time.sleep(0.02)
    at = {kind: _since(posted, when) for kind, when in reversed(events)}  # the first of a kind
    return {"started": at["started"], "training": at["training"],
            "first step": (first_step or time.time()) - posted.timestamp(),
            "end": _since(posted, ended)}  # fmt: skip


def _since(posted: datetime, when: datetime) -> float:
    return (when - posted).total_seconds()


def run(stack: Stack, spec: dict[str, Any]) -> tuple[str, dict[str, float]]:
    job_id = str(stack.api.post("/v1/jobs", json=spec).json()["id"])
    marks = timeline(stack.settings, job_id)
    wait_final(stack.api, job_id, timeout=240)  # type: ignore[arg-type]
    return job_id, marks


def stacks(base: Settings, cluster: RayCluster) -> tuple[list[WorkerProcess], list[Stack]]:
    local = base.model_copy(update={"queue": unique_queue()})
    ray = base.model_copy(update={"queue": unique_queue(), "executor": "ray",
                                  "ray_address": cluster.address})  # fmt: skip
    gang = {"GRADACC_ADVERTISE_HOST": "127.0.0.1", "GRADACC_DEVICES": "1"}
    workers = [
        WorkerProcess(local, name, {**gang, "GRADACC_MACHINE": name}) for name in ("m1", "m2")
    ]
    workers.append(WorkerProcess(ray, "ray-driver", {
        "GRADACC_EXECUTOR": "ray", "GRADACC_RAY_ADDRESS": cluster.address}))  # fmt: skip
    cluster.start()
    registered(local, *workers)
    apis = [Stack(s.executor, TestClient(create_app(s)), s) for s in (local, ray)]
    for stack in apis:
        stack.api.__enter__()
    return workers, apis


def report(results: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n{'seconds from POST':<20}" + "".join(f"{m:>22}" for m in MARKS))
    medians: dict[str, dict[str, float]] = {}
    for name, runs in results.items():
        medians[name] = {m: statistics.median(r[m] for r in runs) for m in MARKS}
        cells = [f"{medians[name][m]:6.2f} ({min(r[m] for r in runs):.2f}-"
                 f"{max(r[m] for r in runs):.2f})" for m in MARKS]  # fmt: skip
        print(f"{name:<20}" + "".join(f"{c:>22}" for c in cells))
    extra = {m: medians["ray"][m] - medians["local"][m] for m in MARKS}
    print(f"{'ray - local':<20}" + "".join(f"{extra[m]:>+22.2f}" for m in MARKS))
    print(f"({len(results['ray'])} runs each, interleaved; median (min-max))")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="executor-start-"))
    with fresh_pg_database("gradacc_bench") as url:
        migrate(url)
        base = Settings(home=home, database_url=url, broker_url=REDIS_URL, queue="unused")
        cluster = RayCluster(settings_env(base))
        began = time.monotonic()
        workers, both = stacks(base, cluster)
        print(f"cluster and workers up in {time.monotonic() - began:.1f} s "
              f"({len(cluster.processes())} Ray processes)")  # fmt: skip
        results: dict[str, list[dict[str, float]]] = {s.name: [] for s in both}
        firsts: dict[str, str] = {}
        try:
            for index in range(args.repeat):
                for stack in both if index % 2 == 0 else both[::-1]:
                    job_id, marks = run(stack, {**GANG, "seed": 1 + index})
                    firsts.setdefault(stack.name, job_id)
                    results[stack.name].append(marks)
                    print(stack.name, job_id, {k: round(v, 2) for k, v in marks.items()})
            report(results)
            compare(base, firsts)
        finally:
            for worker in workers:
                worker.stop()
            print(f"cluster stopped in {cluster.stop():.1f} s")
            for stack in both:
                stack.api.__exit__(None, None, None)
                forget_queue(REDIS_URL, stack.settings.queue)


def compare(settings: Settings, firsts: dict[str, str]) -> None:
    """The same job (seed 1) under both executors: its final weights."""
    weights = {name: final_weights(settings.jobs_dir / job) for name, job in firsts.items()}
    start = initial_weights(JobSpec.model_validate({**REFERENCE, "seed": 1}))
    bound = tolerance(start, weights["local"])
    diff = max_abs_diff(weights["local"], weights["ray"])
    print(f"same job, local vs ray: max |dW| {diff:.2e} (equivalence tolerance {bound:.2e})")


if __name__ == "__main__":
    main()
