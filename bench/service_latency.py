"""Service latency: POST -> running (enqueue, broker, claim) and poll-endpoint throughput.

Starts ``gradacc serve --workers 1`` on 127.0.0.1 (embedded defaults, or PostgreSQL + Redis with
``--stack pg-redis``), then
  1. submits ``--jobs`` tiny jobs one at a time and times POST until GET shows "running"
     (each is cancelled at once so the worker is free for the next);
  2. hammers GET /v1/jobs/{id} from ``--threads`` client threads for ``--seconds`` seconds.
Prints a table; asserts nothing. Usage: .venv/bin/python bench/service_latency.py [--stack ...]
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis

from commands.demo import free_port, wait_ready

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
JOB = {
    "model": "builtin:tiny-bert",
    "dataset": "builtin:sentiment",
    "max_train_samples": 64,
    "max_eval_samples": 32,
    "num_train_epochs": 1,
}


def start_server(stack: str, home: Path, port: int) -> tuple[subprocess.Popen[bytes], str | None]:
    env = {**os.environ, "GRADACC_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    database = None
    if stack == "pg-redis":
        database = f"gradacc_bench_{secrets.token_hex(4)}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{database}"')
        env["GRADACC_DATABASE_URL"] = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
        env["GRADACC_BROKER_URL"] = "redis://127.0.0.1:6379/0"
        env["GRADACC_QUEUE"] = database.replace("gradacc_bench_", "bench-")
        subprocess.run([sys.executable, "-m", "commands.cli", "migrate"], env=env, check=True)
    cmd = [sys.executable, "-m", "commands.cli", "serve", "--port", str(port), "--workers", "1"]
    log = (home / "serve.log").open("wb")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log), database


def stop_server(server: subprocess.Popen[bytes], database: str | None) -> None:
    """Stop ``gradacc serve`` and drop what start_server made: its database and Redis queue."""
    server.send_signal(signal.SIGINT)
    server.wait(timeout=60)
    if database:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        client = redis.Redis()
        leftovers = client.keys(f"*{database.replace('gradacc_bench_', 'bench-')}*")
        if leftovers:
            client.delete(*leftovers)


@contextmanager
def serving(stack: str) -> Iterator[httpx.Client]:
    """``gradacc serve --workers 1`` in a temporary home, on a free port, ready: a client for it.
    Stopped (and its database and queue dropped) afterwards; on an error its log is kept."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server, database = start_server(stack, Path(tmp), port)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                wait_ready(client)
                yield client
        except Exception:
            kept = Path(tempfile.gettempdir()) / f"gradacc-bench-{stack}-serve.log"
            kept.write_bytes((Path(tmp) / "serve.log").read_bytes())
            print(f"server log kept in {kept}", file=sys.stderr)
            raise
        finally:
            stop_server(server, database)


def check_deadline(started: float, what: str, limit_s: float = 60.0) -> None:
    if time.perf_counter() - started > limit_s:
        raise RuntimeError(f"waited more than {limit_s:.0f} s for {what}")


def post_to_running(client: httpx.Client, jobs: int) -> list[float]:
    latencies = []
    for _ in range(jobs):
        started = time.perf_counter()
        job_id = client.post("/v1/jobs", json=JOB).json()["id"]
        while client.get(f"/v1/jobs/{job_id}").json()["status"] != "running":
            check_deadline(started, f"{job_id} to start")
            time.sleep(0.002)
        latencies.append(time.perf_counter() - started)
        client.post(f"/v1/jobs/{job_id}/cancel")
        while "stopped" not in str(client.get(f"/v1/jobs/{job_id}/events").json()):
            check_deadline(started, f"{job_id} to stop")
            time.sleep(0.05)  # the worker is free again
    return latencies


def poll_throughput(
    base_url: str,
    paths: str | list[str],
    threads: int,
    seconds: float,
    headers: dict[str, str] | None = None,
) -> dict[str, float]:
    """``threads`` keep-alive clients GET ``paths`` (one, or a random pick of many) for ``seconds``."""
    choices = [paths] if isinstance(paths, str) else paths
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    host, port = base_url.removeprefix("http://").split(":")

    def hammer(seed: int) -> None:
        # http.client, not httpx: the client shares the 2 cores and must cost as little as it can.
        rng, mine = random.Random(seed), []
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        while time.perf_counter() < stop_at:
            path = rng.choice(choices)
            t0 = time.perf_counter()
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path}: {response.status}")
            mine.append(time.perf_counter() - t0)
        connection.close()
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=hammer, args=(n,)) for n in range(threads)]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    quantiles = statistics.quantiles(latencies, n=100)
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": quantiles[49] * 1000,
        "p99_ms": quantiles[98] * 1000,
    }


def run(stack: str, jobs: int, threads: int, seconds: float) -> dict[str, Any]:
    with serving(stack) as client:
        post_to_running(client, 1)  # warm-up: the worker may still be starting
        latencies = post_to_running(client, jobs)
        job_id = client.get("/v1/jobs", params={"limit": 1}).json()["data"][0]["id"]
        base_url = str(client.base_url).rstrip("/")
        polls = poll_throughput(base_url, f"/v1/jobs/{job_id}", threads, seconds)
        # The same client against a route that does nothing: the ceiling this client sees.
        ceiling = poll_throughput(base_url, "/healthz", threads, seconds)
    return {
        "stack": stack,
        "post_running_ms": [x * 1000 for x in latencies],
        **polls,
        "healthz_rps": ceiling["rps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", choices=["embedded", "pg-redis", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    stacks = ["embedded", "pg-redis"] if args.stack == "both" else [args.stack]
    rows = [run(stack, args.jobs, args.threads, args.seconds) for stack in stacks]
    print(
        f"\n{'stack':<10} {'POST->running median':>21} {'max':>8} {'GET job req/s':>14} "
        f"{'p50':>8} {'p99':>8} {'/healthz req/s':>15}"
    )
    for row in rows:
        post = row["post_running_ms"]
        print(
            f"{row['stack']:<10} {statistics.median(post):>18.0f} ms {max(post):>5.0f} ms "
            f"{row['rps']:>14.0f} {row['p50_ms']:>5.1f} ms {row['p99_ms']:>5.1f} ms "
            f"{row['healthz_rps']:>15.0f}"
        )
    print(f"({args.jobs} jobs; {args.threads} client threads for {args.seconds:.0f} s per route)")


if __name__ == "__main__":
    main()
