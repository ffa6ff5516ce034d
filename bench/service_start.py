"""Start latency: POST -> "running" and POST -> first optimizer step, median and p90.

Starts ``gradacc serve --workers 1`` (embedded broker, or PostgreSQL + Redis), submits ``--jobs``
tiny built-in jobs one at a time — each waits for the previous one to finish plus ``--gap``
seconds, as jobs from people arrive — and times the first GET showing ``running`` and the first
showing ``progress.step >= 1``. Runs with the worker's fork server (default: each job's process
is forked from a pre-imported one) and without it (``GRADACC_FORK_SERVER=false``: a cold
training process per job). Prints a table.

    .venv/bin/python bench/service_start.py [--jobs 20] [--stack both]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_latency import JOB, serving

TERMINAL = {"succeeded", "failed", "cancelled"}


def _time_one(client: httpx.Client) -> tuple[float, float]:
    started = time.perf_counter()
    job_id = client.post("/v1/jobs", json=JOB).json()["id"]
    running = first_step = None
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        now = time.perf_counter() - started
        if running is None and job["status"] != "queued":
            running = now
        if first_step is None and (job.get("progress") or {}).get("step", 0) >= 1:
            first_step = now
        if job["status"] in TERMINAL:
            break
        if now > 120:
            raise RuntimeError(f"{job_id} took more than 120 s")
        time.sleep(0.005)
    if job["status"] != "succeeded" or running is None:
        raise RuntimeError(f"{job_id} ended {job['status']}: {job.get('error')}")
    # A job so short that its first step and its end fell between two polls: count the end.
    return running, first_step if first_step is not None else now


def measure(stack: str, jobs: int, gap: float, warm: bool) -> tuple[list[float], list[float]]:
    os.environ["GRADACC_FORK_SERVER"] = "true" if warm else "false"
    with serving(stack) as client:
        time.sleep(gap + 5)  # the worker starts; its fork server imports
        runs = []
        for _ in range(jobs):
            runs.append(_time_one(client))
            time.sleep(gap)
    return [r for r, _ in runs], [s for _, s in runs]


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument(
        "--gap", type=float, default=3.0, help="seconds between one job's end and the next POST"
    )
    parser.add_argument("--stack", choices=["embedded", "pg-redis", "both"], default="both")
    args = parser.parse_args()
    stacks = ["pg-redis", "embedded"] if args.stack == "both" else [args.stack]
    print(
        f"# start latency: {args.jobs} tiny jobs per row (64 rows, 1 epoch), {args.gap:.0f} s apart"
    )
    print(
        "| broker | training process | POST→running median | p90 | POST→first step median | p90 |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for stack in stacks:
        for warm in (True, False):
            running, first = measure(stack, args.jobs, args.gap, warm)
            broker = "Redis (+PostgreSQL)" if stack == "pg-redis" else "embedded (SQLite)"
            process = "forked (fork server)" if warm else "cold start"
            print(f"| {broker} | {process} | {statistics.median(running) * 1000:,.0f} ms | {_p90(running) * 1000:,.0f} ms "
                  f"| {statistics.median(first) * 1000:,.0f} ms | {_p90(first) * 1000:,.0f} ms |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
