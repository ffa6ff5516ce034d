"""What reporting costs training: samples/s with the worker's database callback and stop poller
(progress every 0.5 s, a metrics row per epoch, a status read every 0.5 s) against none at all.

In one process, on a job row in a fresh PostgreSQL database; runs alternate, median of REPEATS.
Prints a table; asserts nothing.

    .venv/bin/python bench/metrics_cost.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from service_latency import PG_ADMIN

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job, utcnow
from trainer_core.spec.job import JobSpec
from trainer_core.train import train
from worker.child.reporting import DatabaseCallback
from worker.child.stop import DatabaseStopCheck

SPEC = JobSpec(model="builtin:tiny-bert", dataset="builtin:sentiment", num_train_epochs=2, max_eval_samples=64,
               per_device_train_batch_size=8, gradient_accumulation_steps=4)  # fmt: skip


def _running_job(settings: Settings) -> str:
    job_id = f"job_bench{secrets.token_hex(6)}"
    with session_scope(settings) as session:
        session.add(Job(id=job_id, tenant="default", status="running", spec=SPEC.model_dump(),
                        effective_batch_size=SPEC.effective_batch_size, started_at=utcnow()))  # fmt: skip
        session.commit()
    return job_id


def samples_per_second(settings: Settings | None) -> float:
    with tempfile.TemporaryDirectory() as out:
        if settings is None:
            result = train(SPEC, Path(out))
        else:
            job_id = _running_job(settings)
            result = train(SPEC, Path(out), callback=DatabaseCallback(settings, job_id),
                           should_stop=DatabaseStopCheck(settings, job_id))  # fmt: skip
    return statistics.mean(m["samples_per_second"] for m in result.metrics)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--threads", type=int, default=0, help="torch CPU threads (0: torch's default)"
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        # One thread is immune to the spin-wait slowdown that 2 threads suffer when anything else
        # runs on a 2-core box; both sides of every ratio use the same setting.
        torch.set_num_threads(args.threads)
    database = f"gradacc_bench_{secrets.token_hex(4)}"
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    try:
        env = {"GRADACC_DATABASE_URL": url, "PATH": "/usr/bin:/bin"}
        subprocess.run(
            [sys.executable, "-m", "commands.cli", "migrate"],
            env=env,
            check=True,
            capture_output=True,
        )
        settings = Settings(database_url=url)
        samples_per_second(None)  # warm-up: first-use costs land on neither side
        on, off = [], []
        for _ in range(args.repeats):
            off.append(samples_per_second(None))
            on.append(samples_per_second(settings))
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    a, b = statistics.median(on), statistics.median(off)
    print(
        f"# metrics write cost: tiny BERT, 2,000 rows x 2 epochs, b=8, K=4, PostgreSQL, median of {args.repeats}"
    )
    print("| reporting | samples/s | ratio |\n|---|---:|---:|")
    print(
        f"| off (null callback) | {b:,.0f} | 1.000 |\n| on (database callback + stop poller) | {a:,.0f} | {a / b:.3f} |"
    )


if __name__ == "__main__":
    main()
