"""Claim latency with a long queue on PostgreSQL: what the database-decided order costs.

A fresh database gets ``--queued`` queued jobs (20 tenants, priorities 0-2) and ``--history``
finished ones, then:
  1. ``claim_next`` alone, ``--claims`` times (each claimed job ends, and a new queued one keeps
     the queue at its length): median and p95;
  2. the ordering query alone (the candidate SELECT, no lock): its time and EXPLAIN ANALYZE's;
  3. ``queue_spots`` of the job at the back of the queue (the extra cost of polling it);
  4. a real ``gradacc worker`` on Redis takes ``--instant`` urgent jobs that it fails at once
     (their dataset lies outside the data roots): the gap from one job's end to the next one's
     claim, through Celery, Redis, the claim and the refusal.
Prints a table; asserts nothing. Usage: .venv/bin/python bench/claim_latency.py
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import func, insert, select, text, update

from gradacc.db import get_engine, session_scope
from gradacc.migrate import alembic_config
from gradacc.scheduling.claim import claim_next
from gradacc.scheduling.order import candidates
from gradacc.scheduling.position import queue_spots
from gradacc.scheduling.queue import create_celery_app, enqueue_job
from gradacc.settings import Settings
from gradacc.tables import Job, utcnow

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = os.environ.get("GRADACC_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
SPEC = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}
_seq = iter(range(10**9))


def job_row(tenant: str, **values: Any) -> dict[str, Any]:
    job_id = f"job_{int(time.time() * 1000):012x}{next(_seq):08x}"
    row = {"id": job_id, "tenant": tenant, "status": "queued", "spec": SPEC,
           "effective_batch_size": 8, "created_at": utcnow(), "updated_at": utcnow(),
           "enqueued_at": utcnow(), "attempts": 0, "epoch": 0, "step": 0}  # fmt: skip
    return row | values


def fill(settings: Settings, *, queued: int, history: int) -> None:
    past = utcnow() - timedelta(days=1)
    rows = [job_row(f"tenant-{i % 20}", priority=i % 3) for i in range(queued)]
    rows += [job_row(f"tenant-{i % 20}", status="succeeded", started_at=past,
                     finished_at=past + timedelta(seconds=60 + i % 30)) for i in range(history)]  # fmt: skip
    with session_scope(settings) as session:
        for start in range(0, len(rows), 5000):
            session.execute(insert(Job), rows[start : start + 5000])
        session.commit()
        session.execute(text("ANALYZE jobs"))
        session.commit()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def time_claims(settings: Settings, claims: int) -> list[float]:
    took = []
    for n in range(claims):
        with session_scope(settings) as session:
            started = time.perf_counter()
            claimed = claim_next(session, worker="bench", settings=settings)
            took.append((time.perf_counter() - started) * 1000)
            assert claimed is not None
            done = update(Job).where(Job.id == claimed.job_id).values(status="succeeded")
            session.execute(done)
            session.execute(insert(Job), [job_row(f"tenant-{n % 20}", priority=n % 3)])
            session.commit()
    return took


def time_order(settings: Settings, repeats: int) -> tuple[list[float], str]:
    query = candidates(devices=1, max_running=settings.max_running_per_tenant).limit(1)
    took = []
    with get_engine(settings.resolved_database_url()).connect() as connection:
        for _ in range(repeats):
            started = time.perf_counter()
            connection.execute(query).first()
            took.append((time.perf_counter() - started) * 1000)
        compiled = query.compile(connection, compile_kwargs={"literal_binds": True})
        plan = connection.execute(text(f"EXPLAIN ANALYZE {compiled}")).scalars().all()
    return took, next(line for line in plan if "Execution Time" in line)


def time_position(settings: Settings, repeats: int) -> tuple[list[float], int]:
    with session_scope(settings) as session:
        last = session.scalar(
            select(Job.id).where(Job.status == "queued").order_by(Job.priority, Job.id.desc())
        )
        took, position = [], 0
        for _ in range(repeats):
            started = time.perf_counter()
            position = queue_spots(session, [str(last)], settings=settings)[str(last)].position
            took.append((time.perf_counter() - started) * 1000)
    return took, position


def worker_gaps(settings: Settings, instant: int) -> tuple[list[float], list[float]]:
    """Urgent jobs a real worker fails at once: ms from each one's end to the next one's claim."""
    rows = [job_row("urgent", priority=9, spec={**SPEC, "dataset": "/etc/passwd"})
            for _ in range(instant)]  # fmt: skip
    with session_scope(settings) as session:
        session.execute(insert(Job), rows)
        session.commit()
    app = create_celery_app(settings)
    for row in rows:
        enqueue_job(app, settings, row["id"])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADACC_HOME": str(settings.home),
           "GRADACC_DATABASE_URL": str(settings.database_url), "GRADACC_QUEUE": settings.queue,
           "GRADACC_BROKER_URL": str(settings.broker_url), "GRADACC_REQUEUE_AFTER_S": "3600",
           "GRADACC_TRAIN_THREADS": "1"}  # fmt: skip
    with (settings.home / "worker.log").open("wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", "commands.cli", "worker", "--name", "bench"],
                                  cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        ids = [row["id"] for row in rows]
        while time.monotonic() < deadline:
            with session_scope(settings) as session:
                done = session.scalar(
                    select(func.count()).where(Job.id.in_(ids), Job.status == "failed")
                )
            if done == instant:
                break
            time.sleep(0.5)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    with session_scope(settings) as session:
        times = session.execute(
            select(Job.started_at, Job.finished_at).where(Job.id.in_(ids)).order_by(Job.started_at)
        ).all()
    ends = [(start, end) for start, end in times if start is not None and end is not None]
    # started_at is taken as the claim's transaction begins, finished_at once the job is failed
    # (the claim committed, the spec checked): end -> next end bounds end -> next claim above.
    to_claim = [(b[0] - a[1]).total_seconds() * 1000 for a, b in itertools.pairwise(ends)]
    to_end = [(b[1] - a[1]).total_seconds() * 1000 for a, b in itertools.pairwise(ends)]
    return to_claim, to_end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=20_000)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--instant", type=int, default=100)
    args = parser.parse_args()
    name = f"gradacc_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    home = Path(tempfile.mkdtemp(prefix="claim-bench-"))
    settings = Settings(home=home, database_url=f"{base}/{name}", queue=f"bench-{name[-8:]}",
                        broker_url="redis://127.0.0.1:6379/0")  # fmt: skip
    try:
        from alembic import command

        command.upgrade(alembic_config(settings.resolved_database_url()), "head")
        fill(settings, queued=args.queued, history=args.history)
        claims = time_claims(settings, args.claims)
        order, plan = time_order(settings, 100)
        spot, position = time_position(settings, 20)
        to_claim, to_end = worker_gaps(settings, args.instant)
        report(args, claims, order, plan, spot, position, to_claim, to_end)
    finally:
        get_engine(settings.resolved_database_url()).dispose()
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def report(args: argparse.Namespace, claims: list[float], order: list[float], plan: str,
           spot: list[float], position: int, to_claim: list[float],
           to_end: list[float]) -> None:  # fmt: skip
    print(f"PostgreSQL, {args.queued:,} queued jobs (20 tenants, 3 priorities), "
          f"{args.history:,} finished")  # fmt: skip
    print(f"{'measure':<54} {'median ms':>10} {'p95 ms':>8}")
    rows = [
        (f"claim_next (one transaction), {len(claims)} claims", claims),
        ("the ordering query alone (candidate SELECT)", order),
        (f"queue_spots of the last job (position {position:,})", spot),
        (f"worker: a job's end -> the next claim begins ({len(to_claim)})", to_claim),
        (f"worker: a job's end -> the next one claimed and ended ({len(to_end)})", to_end),
    ]
    for label, values in rows:
        if values:
            print(f"{label:<54} {statistics.median(values):>10.1f} {pct(values, 0.95):>8.1f}")
    print(f"EXPLAIN ANALYZE of the ordering query: {plan.strip()}")


if __name__ == "__main__":
    main()
